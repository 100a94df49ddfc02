package kafkagroup

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/sources/internal/kafkaopt"
)

// Option configures either Kafka source: every Option is a
// kafkasource.Option and a franzsource.Option, so one value, or a list
// built as either, serves kafkasource.New and franzsource.New alike. Each
// source's package adds the options of its own client, of its own Option
// type: the other source's New does not compile with one. Only this
// package makes Options.
type Option interface {
	kafkaopt.Shared
}

func set(f func(*kafkaopt.Settings)) Option { return kafkaopt.Func(f) }

// Options is opts as one Option, applied in order: a list of this
// package's options, kept to pass to either source, goes to its New
// beside that source's own options:
//
//	base := []kafkagroup.Option{kafkagroup.DeadLetterTopic("orders-dlq"), kafkagroup.WithLogger(logger)}
//	src, err := kafkasource.New(ctx, brokers, "orders", topics, kafkagroup.Options(base...), kafkasource.WithDialer(dialer))
func Options(opts ...Option) Option { return kafkaopt.Join(opts) }

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
func Ordering(o broker.Ordering) Option { return set(func(s *kafkaopt.Settings) { s.Ordering = o }) }

// MaxInFlightPerPartition bounds the records of one partition fetched and
// not yet settled (default 256). Since the committed offset cannot pass an
// unsettled message, it also bounds how much a crash redelivers. At the
// bound kafkasource's fetch loop waits; franzsource takes no more fetched
// records (the client keeps what it fetched) until settles free room, and
// a partition still at its bound after FetchMaxWait is paused instead, so
// that it holds the others back no longer, and resumes at half the bound.
func MaxInFlightPerPartition(n int) Option {
	return set(func(s *kafkaopt.Settings) { s.MaxInFlight = n })
}

// MaxInFlightBytes bounds the bytes (keys, values and headers) of the
// records fetched and not yet settled, over all partitions (default 256
// MiB): fetching waits above it (franzsource: every partition's fetching
// pauses until half is free), and a partition holding none may always
// take one. With the consumer's MaxInFlight it bounds the memory a slow
// handler can pin.
func MaxInFlightBytes(n int64) Option {
	return set(func(s *kafkaopt.Settings) { s.MaxInFlightBytes = n })
}

// CommitInterval is how often completed offsets are committed (default
// 1s). They are also committed when a partition is revoked and on Close.
func CommitInterval(d time.Duration) Option {
	return set(func(s *kafkaopt.Settings) { s.CommitInterval = d })
}

// RevokeTimeout bounds how long, in a rebalance, a revoked partition's
// in-flight messages may take to be settled before what is complete is
// committed and the group moves on (default 10s). It must be shorter than
// the group's RebalanceTimeout. (The consumer's DrainTimeout, for
// shutdown, is another setting.)
func RevokeTimeout(d time.Duration) Option {
	return set(func(s *kafkaopt.Settings) { s.RevokeTimeout = d })
}

// DeadLetterTopic is where DeadLetter produces (no default: DeadLetter
// fails with ErrNoDeadLetterTopic). The topic must exist, and take every
// record the source's topics do (max.message.bytes): New and Check say so
// otherwise. A dead letter keeps the record's key, value and headers and
// adds the headers below.
func DeadLetterTopic(topic string) Option {
	return set(func(s *kafkaopt.Settings) { s.DeadLetterTopic = topic })
}

// WithLogger sets the logger (when given none, the logger of the Consumer
// that runs it, else slog.Default(); nil counts as none). The client's own
// messages go to it too, its errors at warn and the rest at debug.
func WithLogger(l *slog.Logger) Option { return set(func(s *kafkaopt.Settings) { s.Logger = l }) }

// WithHooks adds observers; each must implement at least one of
// [HookKafkaCommit], [HookKafkaCommitError], [HookKafkaLateAck],
// [HookKafkaRebalance] and [HookKafkaDeadLetter].
func WithHooks(hooks ...Hook) Option {
	return set(func(s *kafkaopt.Settings) {
		for _, h := range hooks {
			s.Hooks = append(s.Hooks, h)
		}
	})
}

// WithMeterProvider sets where the source's metrics go (default the global
// MeterProvider): onceq.kafka.commit_lag, .commit_hold_age,
// .late_settles, .dead_letters and .commits, the same for both sources,
// under each source's package as the instrumentation scope.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return set(func(s *kafkaopt.Settings) { s.Meter = mp })
}

// HeartbeatInterval is how often this member tells the group it is alive
// (default 3s); a revoke is seen at the next heartbeat. Under
// franzsource's ConsumerProtocol the broker sets it instead.
func HeartbeatInterval(d time.Duration) Option {
	return set(func(s *kafkaopt.Settings) { s.Heartbeat = d })
}

// SessionTimeout is how long the group waits for a silent member before it
// takes the member's partitions away (default kafka-go's 30s under
// kafkasource, 45s under franzsource). Under franzsource's
// ConsumerProtocol the broker sets it instead.
func SessionTimeout(d time.Duration) Option {
	return set(func(s *kafkaopt.Settings) { s.Session = d })
}

// RebalanceTimeout is how long the group waits for its members to rejoin,
// and give up revoked partitions, in a rebalance (default kafka-go's 30s
// under kafkasource, 60s under franzsource); RevokeTimeout must be
// shorter.
func RebalanceTimeout(d time.Duration) Option {
	return set(func(s *kafkaopt.Settings) { s.Rebalance = d })
}

// FetchMaxWait is how long a fetch waits on the broker for new records
// (default 1s).
func FetchMaxWait(d time.Duration) Option {
	return set(func(s *kafkaopt.Settings) { s.FetchMaxWait = d })
}

// FetchMaxBytes bounds one fetch response (default 1 MiB under
// kafkasource, where it must exceed the largest record, and 50 MiB under
// franzsource).
func FetchMaxBytes(n int) Option { return set(func(s *kafkaopt.Settings) { s.FetchMaxBytes = n }) }

// Reset says where a partition without a committed offset starts.
type Reset int

const (
	// ResetEarliest starts at the oldest record still in the log: nothing
	// already produced is skipped (the default, for exactly-once work).
	ResetEarliest Reset = kafkaopt.ResetEarliest
	// ResetLatest starts at the end: only records produced after the
	// group first joined are read.
	ResetLatest Reset = kafkaopt.ResetLatest
)

// OffsetReset sets where a group with no committed offset for a partition
// starts (default ResetEarliest). A committed offset that retention has
// already deleted is moved to the oldest record still there (kafkasource,
// as kafka-go's reader does) or to this end (franzsource): the records in
// between are gone either way.
func OffsetReset(r Reset) Option { return set(func(s *kafkaopt.Settings) { s.Reset = int(r) }) }

// Headers a dead-letter record carries besides the original's own.
const (
	// ReasonHeader says why it was dead-lettered.
	ReasonHeader = "onceq-dead-letter-reason"
	// OriginalTopicHeader names the topic it was read from.
	OriginalTopicHeader = "onceq-original-topic"
	// OriginalPartitionHeader is its partition, in decimal.
	OriginalPartitionHeader = "onceq-original-partition"
	// OriginalOffsetHeader is its offset, in decimal.
	OriginalOffsetHeader = "onceq-original-offset"
)
