package franzsource

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/kafkacore"
)

// Option configures a Source; pass them to New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// Protocol is how the group shares partitions among its members.
type Protocol int

const (
	// Cooperative is the classic group protocol with the cooperative-sticky
	// balancer (the default): a rebalance revokes only the partitions that
	// move; this member keeps processing the others meanwhile.
	Cooperative Protocol = iota
	// ConsumerProtocol is the broker-driven consumer group protocol of
	// KIP-848 (Kafka 4.0 and later): the broker assigns partitions and
	// moves them one by one, with no group-wide join. On a broker without
	// it, franz-go falls back to the classic protocol with the (eager)
	// sticky balancer.
	ConsumerProtocol
	// Eager is the classic protocol with the sticky balancer: every
	// rebalance revokes every partition of every member, as kafka-go does.
	// Only for a group that must keep eager members during a migration.
	Eager
)

type config struct {
	ordering         broker.Ordering
	maxInFlight      int
	maxInFlightBytes int64
	commitInterval   time.Duration
	revokeTimeout    time.Duration
	dlqTopic         string
	logger           *slog.Logger
	hooks            []kafkacore.Hook
	heartbeat        time.Duration
	session          time.Duration
	rebalance        time.Duration
	fetchMaxWait     time.Duration
	fetchMaxBytes    int32
	meter            metric.MeterProvider
	reset            Reset
	protocol         Protocol
	tls              *tls.Config
	sasl             []sasl.Mechanism
	dial             func(ctx context.Context, network, host string) (net.Conn, error)
	clientID         string
	instanceID       string
}

func defaultConfig() config {
	return config{
		ordering:         broker.OrderByKey,
		maxInFlight:      256,
		maxInFlightBytes: kafkacore.DefaultMaxInFlightBytes,
		commitInterval:   time.Second,
		revokeTimeout:    10 * time.Second,
		heartbeat:        3 * time.Second,
		session:          45 * time.Second,
		rebalance:        60 * time.Second,
		fetchMaxWait:     time.Second,
		fetchMaxBytes:    50 << 20,
		clientID:         "onceq",
	}
}

func (c *config) validate() error {
	if err := kafkacore.CheckSettings(c.ordering, c.maxInFlight, c.commitInterval, c.revokeTimeout, c.rebalance); err != nil {
		return fmt.Errorf("franzsource: %w: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.heartbeat <= 0 || c.session <= 0 || c.rebalance <= 0:
		return invalidOption("HeartbeatInterval %v, SessionTimeout %v, RebalanceTimeout %v: must be positive",
			c.heartbeat, c.session, c.rebalance)
	case c.maxInFlightBytes < 1:
		return invalidOption("MaxInFlightBytes %d: must be positive", c.maxInFlightBytes)
	case c.fetchMaxWait <= 0 || c.fetchMaxBytes < 1:
		return invalidOption("FetchMaxWait %v, FetchMaxBytes %d: must be positive", c.fetchMaxWait, c.fetchMaxBytes)
	case c.reset != ResetEarliest && c.reset != ResetLatest:
		return invalidOption("OffsetReset %d: unknown", c.reset)
	case c.protocol != Cooperative && c.protocol != ConsumerProtocol && c.protocol != Eager:
		return invalidOption("GroupProtocol %d: unknown", c.protocol)
	}
	return nil
}

// The settings below mean what sources/kafkasource's of the same names mean.

// Ordering is the order the consumer keeps within a partition: by record
// key (broker.OrderByKey, the default), the whole partition
// (broker.OrderByPartition) or none (broker.Unordered).
func Ordering(o broker.Ordering) Option { return optionFunc(func(c *config) { c.ordering = o }) }

// MaxInFlightPerPartition caps a partition's fetched, unsettled records
// (default 256), and so what a crash redelivers. At the cap the source
// takes no more fetched records (the client keeps what it fetched) until
// settles free room; a partition still at its cap after FetchMaxWait is
// paused instead, so that it holds the others back no longer, and resumes
// at half the cap.
func MaxInFlightPerPartition(n int) Option {
	return optionFunc(func(c *config) { c.maxInFlight = n })
}

// MaxInFlightBytes bounds the bytes (keys, values and headers) of the
// records fetched and not yet settled, over all partitions (default 256
// MiB): above it every partition's fetching pauses until half is free. With the consumer's MaxInFlight it bounds
// the memory a slow handler can pin.
func MaxInFlightBytes(n int64) Option {
	return optionFunc(func(c *config) { c.maxInFlightBytes = n })
}

// CommitInterval sets the commit period (default 1s); revokes and Close
// commit too.
func CommitInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.commitInterval = d })
}

// RevokeTimeout caps the wait, in a rebalance, for a revoked partition's
// in-flight messages (default 10s); it must stay below RebalanceTimeout.
func RevokeTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.revokeTimeout = d })
}

// DeadLetterTopic names the existing topic DeadLetter writes to (none by
// default: DeadLetter then returns ErrNoDeadLetterTopic).
func DeadLetterTopic(topic string) Option {
	return optionFunc(func(c *config) { c.dlqTopic = topic })
}

// WithLogger sets the logger (when given none, the logger of the Consumer that runs it, else
// slog.Default(); nil counts as none).
// franz-go logs to it too, errors at warn and the rest at debug.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithHooks adds observers, each implementing one or more of the hook
// interfaces (see [Hook]).
func WithHooks(hooks ...Hook) Option {
	return optionFunc(func(c *config) { c.hooks = append(c.hooks, hooks...) })
}

// WithMeterProvider sets where the source's metrics go (default the global
// MeterProvider). They are sources/kafkasource's: onceq.kafka.commit_lag,
// .late_settles, .dead_letters and .commits.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meter = mp })
}

// GroupProtocol chooses how partitions are shared (default Cooperative).
func GroupProtocol(p Protocol) Option { return optionFunc(func(c *config) { c.protocol = p }) }

// HeartbeatInterval is how often this member tells the group it is alive
// (default 3s). Under ConsumerProtocol the broker sets it instead.
func HeartbeatInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.heartbeat = d })
}

// SessionTimeout is how long the group waits for a silent member before
// its partitions go to others (default 45s). Under ConsumerProtocol the
// broker sets it instead.
func SessionTimeout(d time.Duration) Option { return optionFunc(func(c *config) { c.session = d }) }

// RebalanceTimeout is how long members may take to give up revoked
// partitions in a rebalance (default 60s); RevokeTimeout must be shorter.
func RebalanceTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.rebalance = d })
}

// FetchMaxWait is how long a fetch waits on the broker for new records
// (default 1s).
func FetchMaxWait(d time.Duration) Option { return optionFunc(func(c *config) { c.fetchMaxWait = d }) }

// FetchMaxBytes bounds one fetch response (default 50 MiB).
func FetchMaxBytes(n int32) Option { return optionFunc(func(c *config) { c.fetchMaxBytes = n }) }

// TLS connects to the brokers over TLS with cfg (the dead-letter producer
// too).
func TLS(cfg *tls.Config) Option { return optionFunc(func(c *config) { c.tls = cfg }) }

// SASL authenticates to the brokers with the first mechanism they accept
// (franz-go's pkg/sasl/plain, scram, oauth, aws).
func SASL(m ...sasl.Mechanism) Option {
	return optionFunc(func(c *config) { c.sasl = append(c.sasl, m...) })
}

// WithDialer sets how connections to the brokers are made (default a
// net.Dialer; TLS, when set, wraps what it returns).
func WithDialer(dial func(ctx context.Context, network, host string) (net.Conn, error)) Option {
	return optionFunc(func(c *config) { c.dial = dial })
}

// ClientID names this client to the brokers (default "onceq").
func ClientID(id string) Option { return optionFunc(func(c *config) { c.clientID = id }) }

// InstanceID makes this member static (KIP-345): a restart with the same
// ID within the SessionTimeout gets its partitions back with no
// rebalance, and Close does not leave the group, so its partitions wait
// for the session timeout before moving. Each member needs its own.
func InstanceID(id string) Option { return optionFunc(func(c *config) { c.instanceID = id }) }

// Reset says where a partition without a committed offset starts.
type Reset int

const (
	// ResetEarliest starts at the oldest record still in the log (the
	// default, for exactly-once work).
	ResetEarliest Reset = iota
	// ResetLatest starts at the end: only records produced after the
	// group first joined are read.
	ResetLatest
)

// OffsetReset sets where a group with no committed offset for a partition
// starts (default ResetEarliest). A committed offset that retention has
// already deleted also moves to this end.
func OffsetReset(r Reset) Option { return optionFunc(func(c *config) { c.reset = r }) }

func (r Reset) offset() kgo.Offset {
	if r == ResetLatest {
		return kgo.NewOffset().AtEnd()
	}
	return kgo.NewOffset().AtStart()
}
