package dynamostore

import (
	"log/slog"
	"time"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq/retry"
)

// Option configures a Store: the options of New. Options named With… give
// the store a collaborator (a logger, hooks, a meter provider, a retry
// policy, clients); the others are plain settings.
//
// Every Option is also a TableOption, so the options that describe the
// store's table are given once and read where they apply: CreateTable
// reads the layout (TenantLayout, NamespaceLayout), so the table it makes
// fits the store, and ignores the rest. An option only CreateTable
// understands is a TableOption alone, and New does not take it.
type Option interface {
	TableOption
	apply(*config)
}

// TableOption configures CreateTable: WithStream, TableWaitTimeout, and
// the layout of any Option. It is a type of its own because making a
// table takes settings a Store never reads (its stream, how long to wait
// for it), while the one thing they share, the key layout, is an Option
// that CreateTable reads too.
type TableOption interface{ applyTable(*tableConfig) }

type config struct {
	policy retry.Policy
	tenant bool
	// fromMessage: the tenant layout's keys carry the message's tenant.
	fromMessage bool
	shards      int
	// noClockCheck: the zero config checks clocks.
	noClockCheck bool
	regional     []*ddb.Client
	hooks        []Hook
	logger       *slog.Logger
	meter        metric.MeterProvider
	archive      string
	maxResponse  int
	table        string
	tracer       trace.TracerProvider
}

// option is an Option: what it sets in a Store's configuration, and, for
// the few that apply there too, in CreateTable's.
type option struct {
	store func(*config)
	table func(*tableConfig)
}

func (o option) apply(c *config) { o.store(c) }

func (o option) applyTable(c *tableConfig) {
	if o.table != nil {
		o.table(c)
	}
}

// optionFunc is an Option that only New reads.
func optionFunc(f func(*config)) Option { return option{store: f} }

// WithRetryPolicy sets the backoff used for throttles and transient faults
// (default retry.DefaultPolicy()).
func WithRetryPolicy(p retry.Policy) Option {
	return optionFunc(func(c *config) { c.policy = p })
}

// MaxResponseSize sets the longest response the Store keeps, in bytes
// (default dedup.DefaultMaxResponseSize, 256 KiB; n <= 0 keeps the
// default). A longer one is refused by Complete and ClaimComplete with a
// *dedup.ResponseTooLargeError before anything is sent, and nothing is
// committed. DynamoDB's own item limit is 400 KB, key and attributes
// included: New refuses a larger n, and a record that still does not fit
// is refused with a *dedup.RecordTooLargeError.
func MaxResponseSize(n int) Option { return optionFunc(func(c *config) { c.maxResponse = n }) }

// WithoutClockCheck stops refusing claims whose Now is further from
// DynamoDB's clock than their SkewMargin (*ClockSkewError), for tests and
// simulations that drive the store with a clock of their own. The offset
// is still measured and reported.
func WithoutClockCheck() Option {
	return optionFunc(func(c *config) { c.noClockCheck = true })
}

// WithRegionalClients routes every call for a key to one of clients, chosen
// by a stable hash of the key, instead of the client given to New. Use one
// client per region of a Global Table, in the same order on every worker:
// conditional writes are only linearizable within a region (see the package
// documentation).
func WithRegionalClients(clients []*ddb.Client) Option {
	cs := append([]*ddb.Client(nil), clients...)
	return optionFunc(func(c *config) { c.regional = cs })
}

// WithHooks adds observers (see Hook); New refuses a hook that implements
// none of the hook interfaces.
func WithHooks(hooks ...Hook) Option {
	return optionFunc(func(c *config) { c.hooks = append(c.hooks, hooks...) })
}

// WithLogger sets the logger for events no error reports (when given none,
// the logger of the Consumer or Guard that uses the store, else
// slog.Default(); nil counts as none).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithMeterProvider sets where the store's metrics go (default the global
// MeterProvider): those every store has (db.client.operation.duration,
// onceq.store.errors, onceq.store.retries: see package storeinstr) and
// DynamoDB's own, onceq.dynamodb.transaction_cancellations,
// .clock_offset and .ttl_delete_before_retry.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meter = mp })
}

// WithTracerProvider sets where the spans of the store's requests go
// (default the global TracerProvider): a client span per request, retries
// included, under the caller's span when that one is recorded.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tracer = tp })
}

// WithTable sets the records table (default dedup.DefaultTable,
// "onceq_records"); CreateTable makes it.
func WithTable(name string) Option { return optionFunc(func(c *config) { c.table = name }) }

// layoutOption selects a two-part key layout (partition key and sort key),
// which New and CreateTable both read, so the store and its table agree. Both
// layouts make the same table.
func layoutOption(tenant, fromMessage bool) Option {
	return option{
		store: func(c *config) { c.tenant, c.fromMessage = tenant, fromMessage },
		table: func(c *tableConfig) { c.tenant = tenant },
	}
}

// TenantLayout stores each message's tenant as the partition key and the
// rest of its key as the sort key, so each tenant's records sit together
// and can be listed with a Query (TenantRecords, onceq inspect -tenant).
// The tenant comes from the message: the consumer needs
// consumer.WithTenantFunc, which puts it in front of each key
// (dedup.TenantKey), and refuses to start without it. A tenant hot enough
// to throttle its partition can be spread with TenantShards. Give it to
// CreateTable too: the table has a sort key.
func TenantLayout() Option { return layoutOption(true, true) }

// NamespaceLayout is the earlier layout that TenantLayout used to be: the
// key's first part (without a tenant function, the consumer's static
// namespace) as the partition key, the rest as the sort key. Every record
// of a consumer then shares one partition key, whose throughput (about
// 1,000 writes/s) caps the whole consumer and throttles beyond it. Kept to
// read tables made with it; new tables want TenantLayout or the default.
// It makes the same table as TenantLayout.
func NamespaceLayout() Option { return layoutOption(true, false) }

// TenantShards spreads each tenant of TenantLayout over n partition keys
// ("<tenant>#<0..n-1>", by a hash of the sort key), for tenants whose write
// rate passes one partition's. A listing then reads n partitions. n is
// part of where a record lives: with another n a live key is looked up on
// another partition key and would run again, so n is fixed for the
// table's life (a new n wants a new table, as a new layout does).
func TenantShards(n int) Option { return optionFunc(func(c *config) { c.shards = n }) }

type tableConfig struct {
	tenant      bool
	stream      bool
	waitTimeout time.Duration
	outbox      bool // WithOutbox: the outbox table too
}

// tableOptionFunc is a TableOption only: New does not take it.
type tableOptionFunc func(*tableConfig)

func (f tableOptionFunc) applyTable(c *tableConfig) { f(c) }

// WithStream enables the table's DynamoDB stream (NEW_AND_OLD_IMAGES),
// which an Auditor reads; on an existing table without one, CreateTable
// enables it. A stream costs nothing to write; its reads are billed apart.
func WithStream() TableOption {
	return tableOptionFunc(func(c *tableConfig) { c.stream = true })
}

// TableWaitTimeout bounds how long CreateTable waits for the table to
// become ACTIVE (default 5 minutes).
func TableWaitTimeout(d time.Duration) TableOption {
	return tableOptionFunc(func(c *tableConfig) { c.waitTimeout = d })
}
