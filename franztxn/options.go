package franztxn

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/broker"
)

// Option configures a Processor.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	logger        *slog.Logger
	hooks         []Hook
	meter         metric.MeterProvider
	heartbeat     time.Duration
	session       time.Duration
	rebalance     time.Duration
	txnTimeout    time.Duration
	fetchMaxWait  time.Duration
	maxPoll       int
	concurrency   int
	key           func(*broker.Message) (string, error)
	clientOpts    []kgo.Opt
	retryBackoff  time.Duration
	maxRetryDelay time.Duration
}

func defaults() config {
	return config{
		logger: slog.Default(), heartbeat: 3 * time.Second, session: 45 * time.Second, rebalance: 60 * time.Second,
		txnTimeout: 40 * time.Second, fetchMaxWait: 5 * time.Second, maxPoll: 500, concurrency: 16,
		key: broker.Fingerprint, retryBackoff: 100 * time.Millisecond, maxRetryDelay: 5 * time.Second,
	}
}

func (c *config) validate() error {
	switch {
	case c.logger == nil:
		return invalidOption("WithLogger: nil")
	case c.heartbeat <= 0 || c.session <= c.heartbeat:
		return invalidOption("HeartbeatInterval %v must be positive and below SessionTimeout %v", c.heartbeat, c.session)
	case c.rebalance <= 0:
		return invalidOption("RebalanceTimeout %v: must be positive", c.rebalance)
	case c.txnTimeout < time.Second:
		return invalidOption("TransactionTimeout %v: at least 1s", c.txnTimeout)
	case c.fetchMaxWait <= 0:
		return invalidOption("FetchMaxWait %v: must be positive", c.fetchMaxWait)
	case c.maxPoll <= 0:
		return invalidOption("MaxPollRecords %d: must be positive", c.maxPoll)
	case c.concurrency <= 0:
		return invalidOption("Concurrency %d: must be positive", c.concurrency)
	case c.key == nil:
		return invalidOption("WithKeyFunc: nil")
	}
	return nil
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithHooks adds observers: each hook implements one or more Hook*
// interfaces of this package.
func WithHooks(hooks ...Hook) Option {
	return optionFunc(func(c *config) { c.hooks = append(c.hooks, hooks...) })
}

// WithMeterProvider sets where the metrics go (default the global
// provider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meter = mp })
}

// HeartbeatInterval is the group heartbeat (default 3s).
func HeartbeatInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.heartbeat = d })
}

// SessionTimeout is how long the group waits for a silent member before
// moving its partitions (default 45s).
func SessionTimeout(d time.Duration) Option { return optionFunc(func(c *config) { c.session = d }) }

// RebalanceTimeout bounds how long a rebalance waits for this member
// (default 60s). A rebalance waits for the transaction under way to end,
// so it must exceed the time one transaction takes: MaxPollRecords
// handled, their outputs flushed, the commit.
func RebalanceTimeout(d time.Duration) Option { return optionFunc(func(c *config) { c.rebalance = d }) }

// TransactionTimeout is how long the broker lets a transaction stay open
// before aborting it (default 40s). A worker that dies mid-transaction
// and is not restarted under the same transactional ID holds its
// partitions' offsets unstable this long: the next owner waits for it.
func TransactionTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.txnTimeout = d })
}

// FetchMaxWait bounds how long a fetch waits for records (default 5s).
func FetchMaxWait(d time.Duration) Option { return optionFunc(func(c *config) { c.fetchMaxWait = d }) }

// MaxPollRecords bounds the records of one transaction (default 500).
func MaxPollRecords(n int) Option { return optionFunc(func(c *config) { c.maxPoll = n }) }

// Concurrency bounds the partitions handled at once within a transaction
// (default 16). A partition's records are handled one at a time, in
// offset order, so its outputs are produced in that order.
func Concurrency(n int) Option { return optionFunc(func(c *config) { c.concurrency = n }) }

// WithKeyFunc sets the input's idempotency key, from which each output's
// ID is derived (default broker.Fingerprint: the idempotency-key header,
// else a hash of topic, record key and value, as the Kafka sources key a
// record).
func WithKeyFunc(f func(*broker.Message) (string, error)) Option {
	return optionFunc(func(c *config) { c.key = f })
}

// RetryBackoff is the first wait after a handler's error aborted a
// transaction; it doubles up to max (default 100ms, 5s).
func RetryBackoff(first, max time.Duration) Option {
	return optionFunc(func(c *config) { c.retryBackoff, c.maxRetryDelay = first, max })
}

// WithClientOptions adds franz-go options to the client (TLS, SASL, a
// dialer, a client ID). Options that the mode sets itself (the group,
// the transactional ID, isolation, the rebalance callbacks) are
// overridden.
func WithClientOptions(opts ...kgo.Opt) Option {
	return optionFunc(func(c *config) { c.clientOpts = append(c.clientOpts, opts...) })
}

// Hook is an observer given to WithHooks.
type Hook any

// HookKafkaTransaction sees each transaction end: committed, or aborted
// (a handler's error, a partition lost, a commit refused).
type HookKafkaTransaction interface {
	OnKafkaTransaction(ctx context.Context, e TransactionEvent)
}

// HookKafkaRevoke sees partitions revoked from this member, or lost.
type HookKafkaRevoke interface {
	OnKafkaRevoke(ctx context.Context, partitions map[string][]int32, lost bool)
}

// HookKafkaAssign sees partitions assigned to this member.
type HookKafkaAssign interface {
	OnKafkaAssign(ctx context.Context, partitions map[string][]int32)
}

// TransactionEvent describes one ended transaction.
type TransactionEvent struct {
	// Committed: the outputs and the offsets are committed. Otherwise
	// neither is, and the records are read again.
	Committed bool
	// Records counts the input records of the transaction, Outputs the
	// records it produced.
	Records, Outputs int
	// Err is why it aborted: a handler's error, an output refused, a
	// produce that failed. It is nil when committed, and for a
	// transaction the group overtook (a rebalance ended its generation
	// first, or partitions were lost), which the client aborted itself.
	Err error
}
