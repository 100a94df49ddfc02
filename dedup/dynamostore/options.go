package dynamostore

import (
	"log/slog"
	"time"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/retry"
)

// Option configures a Store. Options named With… give the store a
// collaborator (a logger, hooks, a meter provider, a retry policy,
// clients); the others are plain settings.
type Option interface{ apply(*config) }

// TableOption configures CreateTable.
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
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithRetryPolicy sets the backoff used for throttles and transient faults
// (default retry.DefaultPolicy()).
func WithRetryPolicy(p retry.Policy) Option {
	return optionFunc(func(c *config) { c.policy = p })
}

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
// MeterProvider): onceq.dynamodb.errors, .transaction_cancellations,
// .retries, .clock_offset and .ttl_delete_before_retry.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meter = mp })
}

// LayoutOption selects a two-part key layout (partition key and sort
// key); it is both an Option and a TableOption so the store and its table
// agree. Both layouts make the same table.
type LayoutOption struct{ tenant, fromMessage bool }

func (o LayoutOption) apply(c *config)           { c.tenant, c.fromMessage = o.tenant, o.fromMessage }
func (o LayoutOption) applyTable(c *tableConfig) { c.tenant = o.tenant }

// TenantLayout stores each message's tenant as the partition key and the
// rest of its key as the sort key, so each tenant's records sit together
// and can be listed with a Query (TenantRecords, onceq inspect -tenant).
// The tenant comes from the message: the consumer needs
// consumer.WithTenantFunc, which puts it in front of each key
// (dedup.TenantKey), and refuses to start without it. A tenant hot enough
// to throttle its partition can be spread with TenantShards.
func TenantLayout() LayoutOption { return LayoutOption{tenant: true, fromMessage: true} }

// NamespaceLayout is the earlier layout that TenantLayout used to be: the
// key's first part (without a tenant function, the consumer's static
// namespace) as the partition key, the rest as the sort key. Every record
// of a consumer then shares one partition key, whose throughput (about
// 1,000 writes/s) caps the whole consumer and throttles beyond it. Kept to
// read tables made with it; new tables want TenantLayout or the default.
func NamespaceLayout() LayoutOption { return LayoutOption{tenant: true} }

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
}

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
