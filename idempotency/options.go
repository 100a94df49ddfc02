package idempotency

import (
	"log/slog"
	"time"

	"github.com/onceq/onceq/consumer"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Option configures a Runner (New).
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	wait        time.Duration // 0: fail fast
	expiry      time.Duration
	timeout     time.Duration // 0: derived from expiry
	retention   time.Duration
	namespace   string
	skew        time.Duration
	skewSet     bool
	storeRetry  time.Duration
	payloadHash consumer.PayloadHashFunc
	hooks       []Hook
	guard       []consumer.GuardOption
	// cacheEntries, cacheBytes size the COMPLETED cache; 0: off.
	cacheEntries, cacheBytes int
}

// DefaultInProgressExpiry is InProgressExpiry's default.
const DefaultInProgressExpiry = time.Minute

// DefaultRetention is Retention's default.
const DefaultRetention = 24 * time.Hour

func newConfig(opts []Option) config {
	c := config{expiry: DefaultInProgressExpiry, retention: DefaultRetention, namespace: "idempotency", storeRetry: time.Second}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// Wait makes a repeat that meets an earlier call with its key in progress
// wait for that call's answer, up to max (and no longer than its own
// context), and give it as a replay; past max it fails with an
// *InProgressError. Without it (or with max 0) such a repeat fails at
// once.
func Wait(max time.Duration) Option { return optionFunc(func(c *config) { c.wait = max }) }

// InProgressExpiry is how long a call holds its key when its process dies
// mid-call (default DefaultInProgressExpiry): the lease a claim writes,
// renewed every third of it while the function runs. A repeat after the
// holder died runs the function again once the lease has expired (and
// ClockSkewMargin has passed). The function's own bound, FunctionTimeout,
// must fit inside it with a margin.
func InProgressExpiry(d time.Duration) Option { return optionFunc(func(c *config) { c.expiry = d }) }

// FunctionTimeout bounds one run of the function: its context ends then
// and a result it returns later is not committed. Unset, it is the
// longest that fits InProgressExpiry with the lease's margin (the larger
// of 2s and a tenth): 30s less a little for the default expiry.
func FunctionTimeout(d time.Duration) Option { return optionFunc(func(c *config) { c.timeout = d }) }

// Retention is how long a stored response is replayed to repeats
// (default DefaultRetention, 24h); past it the key is new again. It is
// the expiry policy to publish to clients.
func Retention(d time.Duration) Option { return optionFunc(func(c *config) { c.retention = d }) }

// Namespace prefixes every key, to share one table with consumers or
// with other Runners (default "idempotency").
func Namespace(ns string) Option { return optionFunc(func(c *config) { c.namespace = ns }) }

// ClockSkewMargin is how far the clocks of the processes that share the
// Store may disagree (default consumer.DefaultClockSkewMargin): a lease
// is taken over only once it has been expired that long.
func ClockSkewMargin(d time.Duration) Option {
	return optionFunc(func(c *config) { c.skew, c.skewSet = d, true })
}

// StoreRetryAfter is the wait a *StoreError advises for a store outage
// (default 1s): what an HTTP server sends as Retry-After with its 503.
func StoreRetryAfter(d time.Duration) Option { return optionFunc(func(c *config) { c.storeRetry = d }) }

// WithPayloadHash sets what counts as the same payload under one key
// (default consumer.WholeBody: every byte).
func WithPayloadHash(f consumer.PayloadHashFunc) Option {
	return optionFunc(func(c *config) { c.payloadHash = f })
}

// WithHooks adds observers: each implements this package's hook
// interfaces ([HookResponseReplayed], [HookKeyInProgress]), package
// consumer's (handed to the Guard: outcomes, function runs, heartbeats),
// or both.
func WithHooks(hs ...Hook) Option {
	return optionFunc(func(c *config) { c.hooks = append(c.hooks, hs...) })
}

// WithLogger sets the logger (default slog.Default()), handed to the
// Guard and the Store. Keys are logged by their hash only.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.guard = append(c.guard, consumer.WithLogger(l)) })
}

// WithTracerProvider sets where spans go (default: the global provider):
// the consumer's spans, one per call with its store calls and the
// function's run as children.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.guard = append(c.guard, consumer.WithTracerProvider(tp)) })
}

// WithMeterProvider sets where metrics go (default: the global provider):
// the consumer's, a call counted as a message (outcome "processed",
// "duplicate", "in_flight_elsewhere", ...).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.guard = append(c.guard, consumer.WithMeterProvider(mp)) })
}

// CompletedCache keeps the responses of up to entries keys (and bytes in
// all) completed lately in this process's memory, so that a repeat of
// one within cache.DefaultMaxAge is answered with no store call. Off by
// default: a retry is rare beside the calls that run, and each would
// pay for a copy of its response kept.
func CompletedCache(entries, bytes int) Option {
	return optionFunc(func(c *config) { c.cacheEntries, c.cacheBytes = entries, bytes })
}

// WithClock sets the clock of record times (tests).
func WithClock(clk consumer.Clock) Option {
	return optionFunc(func(c *config) { c.guard = append(c.guard, consumer.WithClock(clk)) })
}

// functionTimeout is FunctionTimeout, or the longest that leaves the
// lease its margin.
func (c *config) functionTimeout() time.Duration {
	if c.timeout > 0 {
		return c.timeout
	}
	return min(c.expiry-2*time.Second, c.expiry*10/11)
}
