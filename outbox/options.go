package outbox

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Option configures a Relay (NewRelay).
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// The defaults of a Relay's options.
const (
	DefaultBatchSize      = 100
	DefaultLeaseTTL       = 30 * time.Second
	DefaultPollInterval   = time.Second
	DefaultRetention      = 24 * time.Hour
	DefaultDeadRetention  = 14 * 24 * time.Hour
	DefaultRetryDelay     = 100 * time.Millisecond
	DefaultMaxRetryDelay  = time.Minute
	DefaultCleanupEvery   = time.Minute
	DefaultWarnAfter      = 5
	defaultBacklogCounted = 10000
)

type config struct {
	owner          string
	batchSize      int
	leaseTTL       time.Duration
	pollInterval   time.Duration
	wake           func(ctx context.Context) error
	retention      time.Duration
	deadRetention  time.Duration
	retryDelay     time.Duration
	maxRetryDelay  time.Duration
	cleanupEvery   time.Duration
	concurrency    int
	warnAfter      int
	logger         *slog.Logger
	meterProvider  metric.MeterProvider
	tracerProvider trace.TracerProvider
}

// Owner sets the relay's token, which fences its leases (default: a random
// token per Relay). Two relays must never share one.
func Owner(token string) Option { return optionFunc(func(c *config) { c.owner = token }) }

// BatchSize bounds how many entries one pass leases and sends (default
// DefaultBatchSize).
func BatchSize(n int) Option { return optionFunc(func(c *config) { c.batchSize = n }) }

// LeaseTTL sets how long the relay holds the entries it leased before
// another relay may take them over (default DefaultLeaseTTL). It must
// exceed the time one batch takes to send: the Sender's context ends with
// the lease, a relay that outlives its lease stops sending what is left of
// its batch, and the entries it sent but could not mark are sent again by
// the next relay.
func LeaseTTL(d time.Duration) Option { return optionFunc(func(c *config) { c.leaseTTL = d }) }

// PollInterval sets how long the relay waits for new entries after a pass
// that found fewer than a full batch (default DefaultPollInterval). A
// WakeOn signal ends the wait early.
func PollInterval(d time.Duration) Option { return optionFunc(func(c *config) { c.pollInterval = d }) }

// WakeOn gives the relay a signal from a store that can notify it of new
// entries (PostgreSQL's LISTEN, a DynamoDB stream): wait blocks until
// entries may have been committed, or ctx ends. The relay runs it in a
// goroutine of its own and starts a pass each time it returns nil; after
// an error it waits PollInterval before calling it again, polling
// meanwhile.
func WakeOn(wait func(ctx context.Context) error) Option {
	return optionFunc(func(c *config) { c.wake = wait })
}

// Retention sets how long dispatched entries are kept before they expire
// (default DefaultRetention).
func Retention(d time.Duration) Option { return optionFunc(func(c *config) { c.retention = d }) }

// DeadRetention sets how long entries the destination refused are kept
// for an operator to see (onceq inspect) before they expire (default
// DefaultDeadRetention).
func DeadRetention(d time.Duration) Option {
	return optionFunc(func(c *config) { c.deadRetention = d })
}

// RetryBackoff sets the delays before an entry whose send failed for a
// reason of the moment is sent again: first, doubled at each further
// failure of the entry, at most max (defaults DefaultRetryDelay and
// DefaultMaxRetryDelay).
func RetryBackoff(first, max time.Duration) Option {
	return optionFunc(func(c *config) { c.retryDelay, c.maxRetryDelay = first, max })
}

// CleanupEvery sets how often a running relay deletes the dispatched and
// dead entries whose retention has ended, in a store that keeps them
// until told (one with a DeleteExpired method, as PostgreSQL's outbox;
// DynamoDB's TTL and the memory store's Sweep need none). Default
// DefaultCleanupEvery; each cleanup deletes up to a thousand entries, and
// runs again at once while it finds that many.
func CleanupEvery(d time.Duration) Option { return optionFunc(func(c *config) { c.cleanupEvery = d }) }

// Concurrency sets how many passes a relay runs at once (default 1),
// each leasing its own batch, as relays on several machines do: one pass
// waits for its batch's acknowledgements while another sends. The order
// of a lane is kept all the same: a lane's entries leased by one pass
// hold back the rest of the lane until they are marked.
func Concurrency(n int) Option { return optionFunc(func(c *config) { c.concurrency = n }) }

// WarnAfter sets after how many failed sends of one entry the relay logs
// it at WARN, with its entry_hash, destination, seq and the last reason
// (default DefaultWarnAfter: about three seconds of retries with the
// default backoff). It logs the entry again at twice as many failures,
// four times as many, and so on, so that an entry that fails for hours
// stays in sight without a line per try. Earlier failures are logged at
// DEBUG.
func WarnAfter(n int) Option { return optionFunc(func(c *config) { c.warnAfter = n }) }

// WithLogger sets the relay's logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithMeterProvider sets where the relay's metrics go (default the global
// provider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meterProvider = mp })
}

// WithTracerProvider sets where the relay's spans go (default the global
// provider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tracerProvider = tp })
}
