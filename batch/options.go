package batch

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/configerr"
)

// ErrInvalidConfig wraps every configuration error NewRunner returns; it
// is the ErrInvalidConfig of every onceq package.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// Option configures a Runner.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	maxRecords  int
	window      time.Duration
	maxAttempts int
	delay       time.Duration
	retention   time.Duration
	keys        bool
	namespace   string
	keyFunc     func(*broker.Message) (string, error)
	keyOf       func(*broker.Message) (key, hash string, err error)
	logger      *slog.Logger
	meter       metric.MeterProvider
}

func defaults() config {
	return config{maxRecords: 500, window: 200 * time.Millisecond, maxAttempts: 5,
		delay: 2 * time.Second, retention: 24 * time.Hour}
}

func (c *config) check() error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("batch: %w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.maxRecords < 1:
		return invalid("MaxRecords %d: must be at least 1", c.maxRecords)
	case c.window <= 0:
		return invalid("Window %v: must be positive", c.window)
	case c.maxAttempts < 1:
		return invalid("MaxAttempts %d: must be at least 1", c.maxAttempts)
	case c.delay <= 0:
		return invalid("RetryDelay %v: must be positive", c.delay)
	case c.retention <= 0:
		return invalid("Retention %v: must be positive", c.retention)
	}
	if c.keys {
		if err := dedup.CheckNamespace(c.namespace); err != nil {
			return fmt.Errorf("batch: %w: DedupKeys: %w", ErrInvalidConfig, err)
		}
		c.keyOf = keyOf(c.namespace)
		if c.keyFunc != nil {
			c.keyOf = keyFrom(c.namespace, c.keyFunc)
		}
	}
	if c.logger == nil {
		c.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.meter == nil {
		c.meter = otel.GetMeterProvider()
	}
	return nil
}

// retryDelay is the wait before the attempt+1-th try, doubling from
// RetryDelay, at most a minute.
func (c *config) retryDelay(attempt int) time.Duration {
	return min(c.delay<<min(attempt-1, 10), time.Minute)
}

// MaxRecords is the most records of one partition a batch holds (default
// 500). On DynamoDB a commit takes at most 100 items, the offset row
// included: a batch whose writes do not fit is split and each part
// commits on its own, so size it to fit.
func MaxRecords(n int) Option { return optionFunc(func(c *config) { c.maxRecords = n }) }

// Window is how long a batch waits, after its first record, for more
// (default 200ms): the latency a record may pay for the batching.
func Window(d time.Duration) Option { return optionFunc(func(c *config) { c.window = d }) }

// MaxAttempts is how often a record that fails on its own runs before
// it is dead-lettered (default 5). An error of retry class Permanent
// (retry.WithClass), or a write's own condition refusing the record's
// writes (a *dedup.BusinessConditionError), dead-letters it at once. A batch that fails is split until the
// record that fails is alone: the records around it commit.
func MaxAttempts(n int) Option { return optionFunc(func(c *config) { c.maxAttempts = n }) }

// RetryDelay is the wait before a failed record's second attempt,
// doubling for each after, at most a minute (default 2s); also the
// backoff of a Store commit that failed for a reason other than a
// refusal.
func RetryDelay(d time.Duration) Option { return optionFunc(func(c *config) { c.delay = d }) }

// DedupKeys claims each record's idempotency key, under namespace, in the
// batch's transaction (off by default): a business message its producer
// sent twice, at two offsets, runs once. The key is the per-message
// consumer's for a Kafka source: the idempotency-key header, else the
// fingerprint of topic, record key and value, so the keys are the ones
// per-message mode claims under the same namespace (the consumer's
// default Namespace is "onceq"), each stored with the payload hash a
// per-message consumer compares (its default, WholeBody), so that it
// takes the record for a duplicate. It costs one more item per record in the
// commit (on DynamoDB, a batch of 99 records at most, and a write per
// record) and the keys' storage for Retention.
func DedupKeys(namespace string) Option {
	return optionFunc(func(c *config) { c.keys, c.namespace = true, namespace })
}

// KeyFunc makes DedupKeys claim f's key of each record (under the
// namespace, as the per-message consumer's WithKeyFunc does) instead of
// the Kafka default. A record f fails for is dead-lettered.
func KeyFunc(f func(*broker.Message) (string, error)) Option {
	return optionFunc(func(c *config) { c.keyFunc = f })
}

// Retention is how long claimed keys are kept (default 24h); with no
// DedupKeys it does nothing.
func Retention(d time.Duration) Option { return optionFunc(func(c *config) { c.retention = d }) }

// WithLogger sets where the Runner logs (default nowhere).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithMeterProvider sets where the Runner's metrics go (default the
// global MeterProvider): onceq.batch.records, onceq.batch.commit.duration,
// onceq.batch.group_lag, onceq.batch.dead_letters,
// onceq.batch.duplicates and onceq.batch.splits.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meter = mp })
}
