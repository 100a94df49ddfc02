package franz

import (
	"context"
	"crypto/tls"
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
	ordering       broker.Ordering
	maxInFlight    int
	commitInterval time.Duration
	revokeTimeout  time.Duration
	dlqTopic       string
	logger         *slog.Logger
	hooks          []kafkacore.Hook
	heartbeat      time.Duration
	session        time.Duration
	rebalance      time.Duration
	fetchMaxWait   time.Duration
	fetchMaxBytes  int32
	meter          metric.MeterProvider
	reset          Reset
	protocol       Protocol
	tls            *tls.Config
	sasl           []sasl.Mechanism
	dial           func(ctx context.Context, network, host string) (net.Conn, error)
	clientID       string
	instanceID     string
}

func defaultConfig() config {
	return config{
		ordering:       broker.OrderByKey,
		maxInFlight:    256,
		commitInterval: time.Second,
		revokeTimeout:  10 * time.Second,
		logger:         slog.Default(),
		heartbeat:      3 * time.Second,
		session:        45 * time.Second,
		rebalance:      60 * time.Second,
		fetchMaxWait:   time.Second,
		fetchMaxBytes:  50 << 20,
		clientID:       "onceq",
	}
}

func (c *config) validate() error {
	switch {
	case c.ordering != broker.OrderByKey && c.ordering != broker.OrderByPartition && c.ordering != broker.Unordered:
		return invalidOption("Ordering %d: unknown", c.ordering)
	case c.maxInFlight < 1:
		return invalidOption("MaxInFlightPerPartition %d: must be at least 1", c.maxInFlight)
	case c.commitInterval <= 0:
		return invalidOption("CommitInterval %v: must be positive", c.commitInterval)
	case c.revokeTimeout <= 0:
		return invalidOption("RevokeTimeout %v: must be positive", c.revokeTimeout)
	case c.revokeTimeout >= c.rebalance:
		return invalidOption("RevokeTimeout %v: must be shorter than the rebalance timeout %v, or the group drops this member while it drains",
			c.revokeTimeout, c.rebalance)
	case c.heartbeat <= 0 || c.session <= 0 || c.rebalance <= 0:
		return invalidOption("HeartbeatInterval %v, SessionTimeout %v, RebalanceTimeout %v: must be positive",
			c.heartbeat, c.session, c.rebalance)
	case c.fetchMaxWait <= 0 || c.fetchMaxBytes < 1:
		return invalidOption("Fetch(%v, %d): must be positive", c.fetchMaxWait, c.fetchMaxBytes)
	case c.logger == nil:
		return invalidOption("WithLogger: must not be nil")
	case c.reset != ResetEarliest && c.reset != ResetLatest:
		return invalidOption("OffsetReset %d: unknown", c.reset)
	case c.protocol != Cooperative && c.protocol != ConsumerProtocol && c.protocol != Eager:
		return invalidOption("GroupProtocol %d: unknown", c.protocol)
	}
	return nil
}

// Ordering declares the order the consumer keeps (default
// broker.OrderByKey: one message in flight per record key within a
// partition); broker.OrderByPartition keeps one per partition,
// broker.Unordered none. The source delivers each partition in offset
// order; the consumer does the serializing.
func Ordering(o broker.Ordering) Option { return optionFunc(func(c *config) { c.ordering = o }) }

// MaxInFlightPerPartition bounds the records of one partition fetched and
// not yet settled (default 256): fetching that partition pauses above it.
// It also bounds how much a crash redelivers.
func MaxInFlightPerPartition(n int) Option {
	return optionFunc(func(c *config) { c.maxInFlight = n })
}

// CommitInterval is how often completed offsets are committed (default
// 1s). They are also committed when a partition is revoked and on Close.
func CommitInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.commitInterval = d })
}

// RevokeTimeout bounds how long a revoked partition's in-flight messages
// may take to be settled before what is complete is committed and the
// partition handed on (default 10s). It must be shorter than the
// RebalanceTimeout.
func RevokeTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.revokeTimeout = d })
}

// DeadLetterTopic is where DeadLetter produces (no default: DeadLetter
// fails with ErrNoDeadLetterTopic). The topic must exist.
func DeadLetterTopic(topic string) Option {
	return optionFunc(func(c *config) { c.dlqTopic = topic })
}

// WithLogger sets the logger (default slog.Default()). franz-go's own
// messages go to it at debug level, its errors at warn.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithHooks adds observers; each must implement at least one of
// [CommitHook], [CommitErrorHook], [LateAckHook], [RebalanceHook] and
// [DeadLetterHook].
func WithHooks(hooks ...Hook) Option {
	return optionFunc(func(c *config) { c.hooks = append(c.hooks, hooks...) })
}

// WithMeterProvider sets where the source's metrics go (default the global
// MeterProvider). They are sources/kafka's: onceq.kafka.commit_lag,
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
