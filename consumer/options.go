package consumer

import (
	"log/slog"
	"time"

	"github.com/onceq/onceq/dedup/cache"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Clock tells the time the consumer writes into records. One clock for all
// records: stores keep none of their own.
type Clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Option configures a Consumer (New).
type Option interface{ apply(*config) }

// GuardOption configures a Guard (NewGuard) or a Consumer: every
// GuardOption is an Option. The options of a Consumer's receive loop alone
// (Concurrency, MaxInFlight, DrainTimeout, WithoutDeadLetters,
// WithoutAdaptiveConcurrency) are not GuardOptions, so giving one to
// NewGuard, where it would mean nothing, does not compile.
type GuardOption interface {
	Option
	guardOption()
}

// optionFunc is an option of the Consumer alone.
type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// guardFunc is an option of both the Consumer and the Guard.
type guardFunc func(*config)

func (f guardFunc) apply(c *config) { f(c) }
func (guardFunc) guardOption()      {}

type config struct {
	concurrency      int
	maxInFlight      int
	handlerTimeout   time.Duration
	leaseTTL         time.Duration
	retention        time.Duration
	retentionSet     bool
	failedRetryDelay time.Duration
	maxRetryDelay    time.Duration
	pendingRecheck   time.Duration
	maxAttempts      int
	drainTimeout     time.Duration
	brokerTimeout    time.Duration
	checkTimeout     time.Duration
	skewMargin       time.Duration
	namespace        string
	keyFunc          KeyFunc
	tenantFunc       KeyFunc
	keyCoversBody    func(*Message) bool // set with a Source's default key
	payloadHash      PayloadHashFunc
	noPayloadCheck   bool // WithoutPayloadCheck: hashes are never compared
	logger           *slog.Logger
	loggerGiven      bool
	clock            Clock
	oneRoundTrip     bool
	hooks            []Hook
	tracerProvider   trace.TracerProvider
	meterProvider    metric.MeterProvider
	propagator       propagation.TextMapPropagator
	fixedConcurrency bool
	noDeadLetter     bool
	cacheEntries     int // 0: off
	cacheBytes       int
	cacheMaxAge      time.Duration
	maxTakeovers     int
	stallTimeout     time.Duration // 0: defaultStallLeases × LeaseTTL
	progressEvery    time.Duration // 0: no progress line
	sendsOnward      bool          // SendsOnward: the Store must commit outgoing messages
}

// newConfig is the defaults with opts applied.
func newConfig[O Option](opts []O) config {
	cfg := config{
		concurrency:      16,
		handlerTimeout:   30 * time.Second,
		leaseTTL:         60 * time.Second,
		retention:        24 * time.Hour,
		failedRetryDelay: 2 * time.Second,
		maxRetryDelay:    5 * time.Minute,
		pendingRecheck:   2 * time.Second,
		maxAttempts:      5,
		drainTimeout:     30 * time.Second,
		brokerTimeout:    DefaultBrokerTimeout,
		checkTimeout:     10 * time.Second,
		skewMargin:       DefaultClockSkewMargin,
		namespace:        "onceq",
		logger:           slog.Default(),
		clock:            wallClock{},
		payloadHash:      WholeBody,
		cacheEntries:     cache.DefaultEntries,
		cacheBytes:       cache.DefaultBytes,
		maxTakeovers:     DefaultMaxTakeovers,
	}
	for _, o := range opts {
		if any(o) != nil { // a nil Option sets nothing, as in every onceq package
			o.apply(&cfg)
		}
	}
	if cfg.maxInFlight == 0 {
		cfg.maxInFlight = 2 * cfg.concurrency
	}
	return cfg
}

// renewFor is how long after a handler starts its lease (and its
// message's visibility) is renewed: HandlerTimeout plus a grace. A handler
// that ignores its cancelled context is then left to lose its lease, and
// its late result is refused.
func (c *config) renewFor() time.Duration { return c.handlerTimeout + leaseMargin(c.handlerTimeout) }

// retryDelay is the delay before the attempt-th run, doubling from
// FailedRetryDelay up to MaxRetryDelay.
func (c *config) retryDelay(attempt int) time.Duration {
	d := c.failedRetryDelay
	for i := 1; i < attempt && d < c.maxRetryDelay; i++ {
		d *= 2
	}
	return min(d, c.maxRetryDelay)
}

// leaseMargin is how much longer than the handler timeout a lease must be,
// so that a handler is stopped before another worker may take its key.
func leaseMargin(handlerTimeout time.Duration) time.Duration {
	return max(2*time.Second, handlerTimeout/10)
}

func (c *config) validate() error {
	switch {
	case c.concurrency < 1:
		return configError("Concurrency %d: must be at least 1", c.concurrency)
	case c.maxInFlight < c.concurrency:
		return configError("MaxInFlight %d: must be at least Concurrency (%d)", c.maxInFlight, c.concurrency)
	case c.handlerTimeout <= 0:
		return configError("HandlerTimeout %v: must be positive", c.handlerTimeout)
	case c.leaseTTL <= 0:
		return configError("LeaseTTL %v: must be positive", c.leaseTTL)
	case c.leaseTTL < c.handlerTimeout+leaseMargin(c.handlerTimeout):
		return configError("LeaseTTL %v: must exceed HandlerTimeout %v by at least %v, or a live handler's key could be taken over",
			c.leaseTTL, c.handlerTimeout, leaseMargin(c.handlerTimeout))
	case c.retention <= c.leaseTTL:
		return configError("Retention %v: must exceed LeaseTTL %v", c.retention, c.leaseTTL)
	case c.failedRetryDelay <= 0 || c.maxRetryDelay < c.failedRetryDelay:
		return configError("FailedRetryDelay %v: must be positive and at most %v", c.failedRetryDelay, c.maxRetryDelay)
	case c.pendingRecheck <= 0:
		return configError("PendingRecheck %v: must be positive", c.pendingRecheck)
	case c.maxAttempts < 1:
		return configError("MaxAttempts %d: must be at least 1", c.maxAttempts)
	case c.maxTakeovers < 1:
		return configError("MaxTakeovers %d: must be at least 1 (a worker killed by a deploy abandons every lease it holds)", c.maxTakeovers)
	case c.drainTimeout <= 0:
		return configError("DrainTimeout %v: must be positive", c.drainTimeout)
	case c.brokerTimeout <= 0:
		return configError("BrokerTimeout %v: must be positive", c.brokerTimeout)
	case c.skewMargin < 0:
		return configError("ClockSkewMargin %v: must not be negative", c.skewMargin)
	case c.checkTimeout <= 0:
		return configError("CheckTimeout %v: must be positive", c.checkTimeout)
	case c.logger == nil || c.clock == nil:
		return configError("Logger and Clock: must not be nil")
	case c.payloadHash == nil:
		return configError("WithPayloadHash(nil): to check no payload, use WithoutPayloadCheck")
	}
	return nil
}

// Concurrency sets how many handlers run at once (default 16).
func Concurrency(n int) Option { return optionFunc(func(c *config) { c.concurrency = n }) }

// MaxInFlight bounds the messages held at once, received but not settled,
// running or queued behind their key (default 2 × Concurrency). Receive is
// never asked for more: this is the back-pressure on the broker.
func MaxInFlight(n int) Option { return optionFunc(func(c *config) { c.maxInFlight = n }) }

// HandlerTimeout bounds one handler call (default 30s).
func HandlerTimeout(d time.Duration) GuardOption {
	return guardFunc(func(c *config) { c.handlerTimeout = d })
}

// LeaseTTL is how long a claim holds its key before another worker may take
// it over (default 60s); it is renewed every LeaseTTL/3 while the handler
// runs. It must exceed HandlerTimeout by a margin.
func LeaseTTL(d time.Duration) GuardOption { return guardFunc(func(c *config) { c.leaseTTL = d }) }

// Retention is how long a COMPLETED record answers duplicates. It must
// exceed how long the source may redeliver a message (its declared
// RedeliveryWindow). Unset, it is 24h, or the redelivery window plus one
// hour when that is longer (an SQS queue's retention period, 4 days by
// default, gives 4 days 1 hour); New logs the raised value at INFO.
func Retention(d time.Duration) GuardOption {
	return guardFunc(func(c *config) { c.retention, c.retentionSet = d, true })
}

// FailedRetryDelay is the first retry delay after a handler failure
// (default 2s); it doubles per attempt up to 5 minutes.
func FailedRetryDelay(d time.Duration) GuardOption {
	return guardFunc(func(c *config) { c.failedRetryDelay = d })
}

// PendingRecheck is how often a message whose key is in flight elsewhere
// is looked at again while it is held in place (default 2s). It is held
// for up to HandlerTimeout, the longest a live holder should need; then it
// is given back to the broker until the holder's lease can have ended
// (its expiry plus ClockSkewMargin), so a crashed holder costs at most two
// deliveries per lease period.
func PendingRecheck(d time.Duration) GuardOption {
	return guardFunc(func(c *config) { c.pendingRecheck = d })
}

// MaxAttempts is how many times the handler may fail for a key before the
// message is dead-lettered (default 5). Attempts are counted in the record,
// so every worker sees them; a run that ends its process or outlives its
// lease fails nothing and is bounded by MaxTakeovers instead.
func MaxAttempts(n int) GuardOption { return guardFunc(func(c *config) { c.maxAttempts = n }) }

// DefaultMaxTakeovers is MaxTakeovers' default. A lease is abandoned only
// when its worker dies (or hangs) while it runs the message's handler. A
// kill at random catches a given run with a chance of at most the run's
// length over the time between kills of its worker: in the project's
// chaos runs (one of three workers killed every 2s on average, handlers
// bounded by 1s) below 1 in 6, so eleven catches in a row come to about
// one message in 360 million. A message that itself ends every process
// that runs it is stopped after eleven crashes, a lease period apart.
const DefaultMaxTakeovers = 10

// MaxTakeovers is how many times a message whose lease was abandoned (its
// handler ended its worker's process, by running out of memory, os.Exit
// or a fatal error, or ran past its lease) is taken over and run again
// (default DefaultMaxTakeovers). The record counts the takeovers
// (dedup.Record.Takeovers), apart from failed runs: the claim that takes
// over once more than this dead-letters the message, with
// ErrTakeoversExhausted and the count in its reason, and does not run the
// handler. A completed or failed run does not reset the count; a dead
// letter does, so a redrive starts afresh.
func MaxTakeovers(n int) GuardOption { return guardFunc(func(c *config) { c.maxTakeovers = n }) }

// DrainTimeout bounds the wait for in-flight handlers once Run's context
// is cancelled (default 30s); then their contexts are cancelled.
func DrainTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.drainTimeout = d })
}

// CheckTimeout bounds each of the checks Run makes before it starts (the
// Store's, then the Source's; default 10s). A check that does not answer
// in time is a failure: an unreachable endpoint is most often a wrong one.
// A Store check that fails for the moment (a 5xx, a throttle, a reset) is
// made again a second later, within the same bound.
func CheckTimeout(d time.Duration) GuardOption {
	return guardFunc(func(c *config) { c.checkTimeout = d })
}

// DefaultClockSkewMargin is ClockSkewMargin's default.
const DefaultClockSkewMargin = 5 * time.Second

// ClockSkewMargin is how far the clocks of workers may disagree (default
// 5s). Leases are written with the holder's clock and judged with the
// claimer's: a worker whose clock runs ahead could take a live lease. So a
// lease is taken over only once it has been expired for longer than the
// margin, and a waiting message comes back only then. The DynamoDB store
// measures each worker's clock against DynamoDB's and refuses to claim
// when it is off by more than the margin (see docs/processing.md, infrastructure failures).
func ClockSkewMargin(d time.Duration) GuardOption {
	return guardFunc(func(c *config) { c.skewMargin = d })
}

// Namespace prefixes every key ("<namespace>#<key>"), to share one table
// among workers or tenants (default "onceq").
func Namespace(ns string) GuardOption { return guardFunc(func(c *config) { c.namespace = ns }) }

// WithKeyFunc replaces the default idempotency key: the
// IdempotencyKeyAttribute when present, else the SHA-256 of the body.
// payload.JSONKey takes the key from a field of a JSON body. A key
// function's error dead-letters the message, its text as the reason.
func WithKeyFunc(f KeyFunc) GuardOption { return WithSourceKey(f, nil) }

// WithSourceKey is WithKeyFunc for a key a Source derives from the
// message, as broker.Fingerprint is (a Source's KeyFromRecord): for a
// message where coversBody holds, the key is a hash over the body, stored
// as a derived key (see dedup.DerivedKey) and with no payload hash of its
// own. For a Guard fed by hand, such as the Lambda handlers'
// (lambda/sqslambda, lambda/kafkalambda).
func WithSourceKey(f KeyFunc, coversBody func(*Message) bool) GuardOption {
	return guardFunc(func(c *config) { c.keyFunc, c.keyCoversBody = f, coversBody })
}

// WithTenantFunc takes each message's tenant from f (payload.JSONKey
// reads one from a JSON field), and puts it in front of the key
// (dedup.TenantKey), so a store with a tenant layout keeps each tenant's
// records on the tenant's own partition key. A Store with a tenant layout
// requires it. A tenant function's error (no tenant) dead-letters the
// message, as a key function's does.
func WithTenantFunc(f KeyFunc) GuardOption { return guardFunc(func(c *config) { c.tenantFunc = f }) }

// WithLogger sets the logger (default slog.Default(), as in every onceq
// package). Outcomes other than processed and duplicate are logged, with
// the key's hash, never the key. The logger is handed to the Source and
// the Store too (broker.Runtime, dedup.Runtime), unless they were given their own.
func WithLogger(l *slog.Logger) GuardOption {
	return guardFunc(func(c *config) {
		if l != nil {
			c.logger, c.loggerGiven = l, true
		}
	})
}

// WithClock sets the clock of record times (tests).
func WithClock(clk Clock) GuardOption { return guardFunc(func(c *config) { c.clock = clk }) }

// OneRoundTrip runs the handler before claiming and commits the record
// straight as COMPLETED with the handler's Writes in one atomic call: for
// handlers whose whole effect is their Writes (no outside calls), since the
// handler also runs for duplicates. The Store must declare ClaimComplete in its dedup.Capabilities.
func OneRoundTrip() GuardOption { return guardFunc(func(c *config) { c.oneRoundTrip = true }) }

// WithHooks adds observers; each must implement at least one of the hook
// interfaces ([HookMessageOutcome], [HookMessageHandled],
// [HookMessageSettled], [HookPoolInFlight], [HookMessageHeartbeat],
// [HookClaimExpiredPresent], [HookPoolConcurrencyLimit]).
func WithHooks(hooks ...Hook) GuardOption {
	return guardFunc(func(c *config) { c.hooks = append(c.hooks, hooks...) })
}

// WithTracerProvider sets where spans go (default: the global provider).
func WithTracerProvider(tp trace.TracerProvider) GuardOption {
	return guardFunc(func(c *config) { c.tracerProvider = tp })
}

// WithMeterProvider sets where metrics go (default: the global provider).
func WithMeterProvider(mp metric.MeterProvider) GuardOption {
	return guardFunc(func(c *config) { c.meterProvider = mp })
}

// WithPropagator sets how trace context is read from message attributes
// (default: W3C trace context and baggage).
func WithPropagator(p propagation.TextMapPropagator) GuardOption {
	return guardFunc(func(c *config) { c.propagator = p })
}

// CompletedCache sizes the in-process cache of COMPLETED records that
// answers repeated duplicates without a store call (default 10,000 records,
// 16 MiB). Entries never outlive their record's expiry, nor
// CompletedCacheMaxAge.
func CompletedCache(entries, bytes int) GuardOption {
	return guardFunc(func(c *config) { c.cacheEntries, c.cacheBytes = max(entries, 1), bytes })
}

// CompletedCacheMaxAge bounds how long a cached COMPLETED record answers
// duplicates without asking the store (default cache.DefaultMaxAge, 10s):
// how long this worker may still answer a duplicate after the record was
// deleted, rewritten or re-claimed behind it.
func CompletedCacheMaxAge(d time.Duration) GuardOption {
	return guardFunc(func(c *config) { c.cacheMaxAge = d })
}

// WithoutCompletedCache turns the COMPLETED-record cache off: every duplicate
// asks the store.
func WithoutCompletedCache() GuardOption { return guardFunc(func(c *config) { c.cacheEntries = 0 }) }

// WithoutDeadLetters accepts a Source that has no dead-letter destination.
// A message that should be dead-lettered is then kept in the store as
// DEAD_LETTER, its handler never run again, and released where the broker
// keeps it readable (Kafka: committed past), else given back after the
// longest retry delay until the broker's own policy moves it (counted as
// a failed dead letter each time). Without this option New refuses such a
// Source.
func WithoutDeadLetters() Option { return optionFunc(func(c *config) { c.noDeadLetter = true }) }

// WithoutAdaptiveConcurrency keeps Concurrency handlers running whatever
// the store says. By default the consumer lowers its concurrency
// multiplicatively when the store reports throttles and raises it
// additively as calls succeed, between 1 and Concurrency; receiving follows
// through MaxInFlight.
func WithoutAdaptiveConcurrency() Option {
	return optionFunc(func(c *config) { c.fixedConcurrency = true })
}

// givenLogger is the logger this consumer was given, to hand its Source
// and Store (broker.Runtime, dedup.Runtime) for them to use unless they
// have their own; nil when it was given none.
func (c *config) givenLogger() *slog.Logger {
	if c.loggerGiven {
		return c.logger
	}
	return nil
}
