package franzsource

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/onceq/onceq/sources/internal/kafkaopt"
)

// Option configures a Source (New, NewBatch): every kafkagroup.Option,
// which kafkasource takes too, and the options of this package, which
// only this source takes (kafkasource.New does not compile with one).
type Option interface {
	kafkaopt.Franz
}

func clientOption(f func(*config)) Option { return kafkaopt.FranzOnly(f) }

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
	kafkaopt.Settings
	protocol   Protocol
	tls        *tls.Config
	sasl       []sasl.Mechanism
	dial       func(ctx context.Context, network, host string) (net.Conn, error)
	clientID   string
	instanceID string
}

// Complete fills in this source's defaults and checks what only it takes.
func (c *config) Complete() error {
	c.Default(3*time.Second, 45*time.Second, 60*time.Second, 50<<20)
	if c.protocol != Cooperative && c.protocol != ConsumerProtocol && c.protocol != Eager {
		return invalidOption("GroupProtocol %d: unknown", c.protocol)
	}
	return nil
}

// GroupProtocol chooses how partitions are shared (default Cooperative).
func GroupProtocol(p Protocol) Option {
	return clientOption(func(c *config) { c.protocol = p })
}

// TLS connects to the brokers over TLS with cfg (the dead-letter producer
// too).
func TLS(cfg *tls.Config) Option { return clientOption(func(c *config) { c.tls = cfg }) }

// SASL authenticates to the brokers with the first mechanism they accept
// (franz-go's pkg/sasl/plain, scram, oauth, aws).
func SASL(m ...sasl.Mechanism) Option {
	return clientOption(func(c *config) { c.sasl = append(c.sasl, m...) })
}

// WithDialer sets how connections to the brokers are made (default a
// net.Dialer; TLS, when set, wraps what it returns).
func WithDialer(dial func(ctx context.Context, network, host string) (net.Conn, error)) Option {
	return clientOption(func(c *config) { c.dial = dial })
}

// ClientID names this client to the brokers (default "onceq").
func ClientID(id string) Option { return clientOption(func(c *config) { c.clientID = id }) }

// InstanceID makes this member static (KIP-345): a restart with the same
// ID within the SessionTimeout gets its partitions back with no
// rebalance, and Close does not leave the group, so its partitions wait
// for the session timeout before moving. Each member needs its own.
func InstanceID(id string) Option {
	return clientOption(func(c *config) { c.instanceID = id })
}

func resetOffset(r int) kgo.Offset {
	if r == kafkaopt.ResetLatest {
		return kgo.NewOffset().AtEnd()
	}
	return kgo.NewOffset().AtStart()
}
