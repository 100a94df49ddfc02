package sharesource

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/onceq/onceq/sources/kafkagroup"
)

// Option configures a Source. Only this package makes them: the options of
// the group sources (package kafkagroup, franzsource) do not compile here.
type Option interface{ applyShare(*config) }

type optionFunc func(*config)

func (f optionFunc) applyShare(c *config) { f(c) }

type config struct {
	logger     *slog.Logger
	dlq        string
	members    int
	maxRecords int
	lock       time.Duration // 0: read from the brokers
	earliest   bool
	attempts   int
	leaseTTL   time.Duration
	clientID   string
	tls        *tls.Config
	sasl       []sasl.Mechanism
	dial       func(ctx context.Context, network, host string) (net.Conn, error)
}

func (c *config) complete() error {
	if c.members == 0 {
		c.members = 4
	}
	if c.maxRecords == 0 {
		c.maxRecords = 100
	}
	if c.clientID == "" {
		c.clientID = "onceq"
	}
	switch {
	case c.members < 1 || c.members > 64:
		return invalidOption("Members %d: must be 1 to 64", c.members)
	case c.maxRecords < 1 || c.maxRecords > 10000:
		return invalidOption("MaxRecords %d: must be 1 to 10000", c.maxRecords)
	case c.lock < 0:
		return invalidOption("RecordLock %v: must not be negative", c.lock)
	case c.attempts < 0 || c.leaseTTL < 0:
		return invalidOption("CheckAttempts(%d, %v): must not be negative", c.attempts, c.leaseTTL)
	}
	return nil
}

func invalidOption(format string, args ...any) error {
	return fmt.Errorf("sharesource: %w: %s", kafkagroup.ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// DeadLetterTopic is where DeadLetter produces a record, with its key,
// value and headers and the kafkagroup.ReasonHeader and origin headers,
// before accepting it. Without one, DeadLetter rejects the record: the
// broker archives it (it stays in the topic's log and is never delivered
// again) and the store keeps its DEAD_LETTER outcome and reason.
func DeadLetterTopic(topic string) Option { return optionFunc(func(c *config) { c.dlq = topic }) }

// Members is how many share-group members (franz-go clients) the Source
// runs (default 4). Each polls again only once every record of its last
// poll is settled, so a slow record holds back its own member only: more
// members keep records coming around slow handlers.
func Members(n int) Option { return optionFunc(func(c *config) { c.members = n }) }

// MaxRecords bounds the records one member acquires per poll (default
// 100): what a crash, or a slow record, holds up to the lock duration.
func MaxRecords(n int) Option { return optionFunc(func(c *config) { c.maxRecords = n }) }

// RecordLock is the group's acquisition lock duration, when the brokers
// cannot be asked (default: read from group.share.record.lock.duration.ms
// at New, else Kafka's default of 30s). Set it to what the broker uses: the
// consumer renews each held record's lock at a quarter of it. Where the
// brokers do say their lock duration, theirs is used, and a RecordLock
// that differs is logged.
func RecordLock(d time.Duration) Option { return optionFunc(func(c *config) { c.lock = d }) }

// FromEarliest sets the group's share.auto.offset.reset to earliest at
// New, so that records produced before the group's first member joined are
// delivered too. Without it, and unless an operator set it, a new share
// group starts at the end of the topic.
func FromEarliest() Option { return optionFunc(func(c *config) { c.earliest = true }) }

// CheckAttempts makes New refuse a group whose delivery-count limit
// (group.share.delivery.count.limit) would archive a record before the
// consumer spent maxAttempts on it, with leaseTTL the consumer's LeaseTTL:
// see broker.ReceivesNeeded. Pass the consumer's MaxAttempts and
// LeaseTTL.
func CheckAttempts(maxAttempts int, leaseTTL time.Duration) Option {
	return optionFunc(func(c *config) { c.attempts, c.leaseTTL = maxAttempts, leaseTTL })
}

// WithLogger sets the logger (when given none, the logger of the consumer
// that runs it, else slog.Default()).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// ClientID names this client to the brokers (default "onceq").
func ClientID(id string) Option { return optionFunc(func(c *config) { c.clientID = id }) }

// TLS connects to the brokers over TLS with cfg.
func TLS(cfg *tls.Config) Option { return optionFunc(func(c *config) { c.tls = cfg }) }

// SASL authenticates to the brokers with the first mechanism they accept.
func SASL(m ...sasl.Mechanism) Option {
	return optionFunc(func(c *config) { c.sasl = append(c.sasl, m...) })
}

// WithDialer sets how connections to the brokers are made (default a
// net.Dialer). It replaces TLS: a dialer that needs TLS makes it itself.
func WithDialer(dial func(ctx context.Context, network, host string) (net.Conn, error)) Option {
	return optionFunc(func(c *config) { c.dial = dial })
}
