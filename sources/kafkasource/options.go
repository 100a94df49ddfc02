package kafkasource

import (
	"fmt"
	"log/slog"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/kafkacore"
)

// Option configures a Source; pass them to New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMeterProvider sets where the source's metrics go (default the global
// MeterProvider): onceq.kafka.commit_lag, .late_settles, .dead_letters and
// .commits.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meter = mp })
}

// groupTimings tune kafka-go's consumer-group protocol; zero keeps
// kafka-go's default.
type groupTimings struct {
	heartbeat, session, rebalance, joinBackoff time.Duration
}

type config struct {
	ordering         broker.Ordering
	maxInFlight      int
	maxInFlightBytes int64
	commitInterval   time.Duration
	revokeTimeout    time.Duration
	dlqTopic         string
	logger           *slog.Logger
	hooks            []Hook
	timings          groupTimings
	fetchMaxWait     time.Duration
	fetchMaxBytes    int
	dlqBatch         time.Duration
	meter            metric.MeterProvider
	dialer           *kgo.Dialer
	reset            Reset
}

func defaultConfig() config {
	return config{
		ordering:         broker.OrderByKey,
		maxInFlight:      256,
		maxInFlightBytes: kafkacore.DefaultMaxInFlightBytes,
		commitInterval:   time.Second,
		revokeTimeout:    10 * time.Second,
		fetchMaxWait:     time.Second,
		fetchMaxBytes:    1 << 20,
		dlqBatch:         5 * time.Millisecond,
		dialer:           &kgo.Dialer{Timeout: 10 * time.Second, DualStack: true},
	}
}

// Kafka-go's default rebalance timeout; a revoked partition's drain must
// end well before it or this member is dropped from the group.
const defaultRebalanceTimeout = 30 * time.Second

func (c *config) validate() error {
	rebalance := c.timings.rebalance
	if rebalance == 0 {
		rebalance = defaultRebalanceTimeout
	}
	if err := kafkacore.CheckSettings(c.ordering, c.maxInFlight, c.commitInterval, c.revokeTimeout, rebalance); err != nil {
		return fmt.Errorf("kafkasource: %w: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.timings.heartbeat < 0 || c.timings.session < 0 || c.timings.rebalance < 0 || c.timings.joinBackoff < 0:
		return invalidOption("HeartbeatInterval %v, SessionTimeout %v, RebalanceTimeout %v, JoinGroupBackoff %v: must not be negative",
			c.timings.heartbeat, c.timings.session, c.timings.rebalance, c.timings.joinBackoff)
	case c.maxInFlightBytes < 1:
		return invalidOption("MaxInFlightBytes %d: must be positive", c.maxInFlightBytes)
	case c.fetchMaxWait <= 0 || c.fetchMaxBytes < 1:
		return invalidOption("Fetch(%v, %d): must be positive", c.fetchMaxWait, c.fetchMaxBytes)
	case c.dialer == nil:
		return invalidOption("WithDialer: must not be nil")
	case c.reset != ResetEarliest && c.reset != ResetLatest:
		return invalidOption("OffsetReset %d: unknown", c.reset)
	}
	return nil
}

// Ordering declares the order the consumer keeps (default
// broker.OrderByKey: one message in flight per record key within a
// partition). broker.OrderByPartition keeps one in flight per partition;
// broker.Unordered none. The consumer does the serializing; the source
// delivers each partition in offset order.
//
// Records without a key share the key "" and so, under OrderByKey, run one
// at a time per partition: the partition order is all Kafka promised them.
// The consumer orders by topic, partition and key, so with several topics
// same-numbered partitions do not wait for each other.
func Ordering(o broker.Ordering) Option { return optionFunc(func(c *config) { c.ordering = o }) }

// MaxInFlightPerPartition bounds the messages of one partition fetched and
// not yet settled (default 256): the fetch loop waits above it. Since the
// committed offset cannot pass an unsettled message, it also bounds how
// much a crash redelivers.
func MaxInFlightPerPartition(n int) Option {
	return optionFunc(func(c *config) { c.maxInFlight = n })
}

// MaxInFlightBytes bounds the bytes (keys, values and headers) of the
// records fetched and not yet settled, over all partitions (default 256
// MiB): fetching waits above it, as it does above MaxInFlightPerPartition
// records, and a partition holding none may always take one. With the
// consumer's MaxInFlight it bounds the memory a slow handler can pin.
func MaxInFlightBytes(n int64) Option {
	return optionFunc(func(c *config) { c.maxInFlightBytes = n })
}

// CommitInterval is how often completed offsets are committed (default
// 1s). They are also committed when a partition is revoked and on Close.
func CommitInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.commitInterval = d })
}

// RevokeTimeout bounds how long, in a rebalance, a revoked partition's
// in-flight messages may take to be settled before what is complete is
// committed and the group moves on (default 10s). It must be shorter than
// the group's rebalance timeout. (The consumer's DrainTimeout, for
// shutdown, is another setting.)
func RevokeTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.revokeTimeout = d })
}

// DeadLetterTopic is where DeadLetter produces (no default: DeadLetter
// fails with ErrNoDeadLetterTopic). The topic must exist.
func DeadLetterTopic(topic string) Option {
	return optionFunc(func(c *config) { c.dlqTopic = topic })
}

// WithLogger sets the logger (when given none, the logger of the Consumer that runs it, else
// slog.Default(); nil counts as none).
// kafka-go's own messages go to it at debug level, its errors at warn.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithHooks adds observers; each must implement at least one of
// [CommitHook], [CommitErrorHook], [LateAckHook], [RebalanceHook] and
// [DeadLetterHook].
func WithHooks(hooks ...Hook) Option {
	return optionFunc(func(c *config) { c.hooks = append(c.hooks, hooks...) })
}

// HeartbeatInterval is how often this member tells the group it is alive
// (default kafka-go's, 3s); a revoke is seen at the next heartbeat.
func HeartbeatInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timings.heartbeat = d })
}

// SessionTimeout is how long the group waits for a silent member before it
// takes the member's partitions away (default kafka-go's, 30s).
func SessionTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timings.session = d })
}

// RebalanceTimeout is how long the group waits for its members to rejoin in
// a rebalance (default kafka-go's, 30s); RevokeTimeout must be shorter.
func RebalanceTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timings.rebalance = d })
}

// JoinGroupBackoff is how long this member waits before joining again after
// a failed attempt (default kafka-go's, 5s).
func JoinGroupBackoff(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timings.joinBackoff = d })
}

// FetchMaxWait is how long a fetch waits on the broker for new records
// (default 1s).
func FetchMaxWait(d time.Duration) Option { return optionFunc(func(c *config) { c.fetchMaxWait = d }) }

// FetchMaxBytes bounds one fetch response (default 1 MiB); it must exceed
// the largest record.
func FetchMaxBytes(n int) Option { return optionFunc(func(c *config) { c.fetchMaxBytes = n }) }

// WithDialer sets how connections to the brokers are made: TLS, SASL,
// client ID, timeouts (default: plain TCP, 10 s connect timeout). The
// dead-letter writer uses the same TLS and SASL settings.
func WithDialer(d *kgo.Dialer) Option { return optionFunc(func(c *config) { c.dialer = d }) }

// Reset says where a partition without a committed offset starts.
type Reset int

const (
	// ResetEarliest starts at the oldest record still in the log: nothing
	// already produced is skipped (the default, for exactly-once work).
	ResetEarliest Reset = iota
	// ResetLatest starts at the end: only records produced after the
	// group first joined are read.
	ResetLatest
)

// OffsetReset sets where a group with no committed offset for a partition
// starts (default ResetEarliest). A committed offset that retention has
// already deleted is moved to the oldest record still there (kafka-go's
// reader does so): the records in between are gone either way.
func OffsetReset(r Reset) Option { return optionFunc(func(c *config) { c.reset = r }) }

func (r Reset) startOffset() int64 {
	if r == ResetLatest {
		return kgo.LastOffset
	}
	return kgo.FirstOffset
}
