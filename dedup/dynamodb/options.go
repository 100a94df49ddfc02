package dynamodb

import (
	"log/slog"
	"time"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/retry"
)

// Option configures a Store.
type Option interface{ apply(*config) }

// TableOption configures CreateTable.
type TableOption interface{ applyTable(*tableConfig) }

type config struct {
	policy retry.Policy
	tenant bool
	// noClockCheck: the zero config checks clocks.
	noClockCheck bool
	regional     []*ddb.Client
	hooks        Hooks
	logger       *slog.Logger
	meter        metric.MeterProvider
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithRetryPolicy sets the backoff used for throttles and transient faults
// (default retry.DefaultPolicy()).
func WithRetryPolicy(p retry.Policy) Option {
	return optionFunc(func(c *config) { c.policy = p })
}

// ClockCheck(false) stops refusing claims whose Now is further from
// DynamoDB's clock than their SkewMargin (*ClockSkewError), for tests and
// simulations that drive the store with a clock of their own. The offset
// is still measured and reported. Default true.
func ClockCheck(enabled bool) Option {
	return optionFunc(func(c *config) { c.noClockCheck = !enabled })
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

// WithHooks sets observer callbacks.
func WithHooks(h Hooks) Option {
	return optionFunc(func(c *config) { c.hooks = h })
}

// WithLogger sets the logger for events no error reports (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithMeterProvider sets where the store's metrics go (default the global
// MeterProvider): onceq.dynamodb.errors, .transaction_cancellations and
// .retries.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meter = mp })
}

// LayoutOption selects the tenant layout; it is both an Option and a
// TableOption so the store and its table agree.
type LayoutOption struct{ tenant bool }

func (o LayoutOption) apply(c *config)           { c.tenant = o.tenant }
func (o LayoutOption) applyTable(c *tableConfig) { c.tenant = o.tenant }

// WithTenantLayout stores the tenant (the key before its first '#') as the
// partition key and the rest as the sort key, so records can be listed per
// tenant. Keys must then have a non-empty tenant and fingerprint.
func WithTenantLayout() LayoutOption { return LayoutOption{tenant: true} }

// Hooks observe the store; nil funcs are skipped. They are called
// synchronously from concurrent goroutines, so they must be fast and safe
// for concurrent use. Fields may be added; set them by name.
type Hooks struct {
	// OnCall is told of every DynamoDB request: the store operation
	// ("Claim", "Complete", ...), its duration and its error (nil on
	// success; a condition failure is an error here too).
	OnCall func(op string, dur time.Duration, err error)
	// OnRetry is told of every retried error, with its class and
	// DynamoDB error code ("" when there is none, e.g. a reset).
	OnRetry func(op string, class retry.Class, errorCode string)
	// OnCancellation is told of every non-"None" reason of a cancelled
	// transaction (e.g. "ConditionalCheckFailed").
	OnCancellation func(reason string)
	// OnExpiredPresent is told when a claim took over an expired record
	// that TTL had not yet deleted.
	OnExpiredPresent func()
}

func (h Hooks) call(op string, d time.Duration, err error) {
	if h.OnCall != nil {
		h.OnCall(op, d, err)
	}
}

func (h Hooks) retry(op string, c retry.Class, code string) {
	if h.OnRetry != nil {
		h.OnRetry(op, c, code)
	}
}

func (h Hooks) cancellation(reason string) {
	if h.OnCancellation != nil {
		h.OnCancellation(reason)
	}
}

func (h Hooks) expiredPresent() {
	if h.OnExpiredPresent != nil {
		h.OnExpiredPresent()
	}
}

type tableConfig struct {
	tenant      bool
	waitTimeout time.Duration
}

type tableOptionFunc func(*tableConfig)

func (f tableOptionFunc) applyTable(c *tableConfig) { f(c) }

// WithTableWaitTimeout bounds how long CreateTable waits for the table to
// become ACTIVE (default 5 minutes).
func WithTableWaitTimeout(d time.Duration) TableOption {
	return tableOptionFunc(func(c *tableConfig) { c.waitTimeout = d })
}
