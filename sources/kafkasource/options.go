package kafkasource

import (
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/sources/internal/kafkaopt"
)

// Option configures a Source (New, NewBatch): every kafkagroup.Option,
// which franzsource takes too, and the options of this package, which
// only this source takes (franzsource.New does not compile with one).
type Option interface {
	kafkaopt.KafkaGo
}

type config struct {
	kafkaopt.Settings
	joinBackoff time.Duration
	dialer      *kgo.Dialer
}

// Complete fills in kafka-go's defaults and checks what only this source
// takes.
func (c *config) Complete() error {
	// kafka-go's own defaults, which the check of RevokeTimeout needs.
	c.Default(3*time.Second, 30*time.Second, 30*time.Second, 1<<20)
	switch {
	case c.joinBackoff < 0:
		return invalidOption("JoinGroupBackoff %v: must not be negative", c.joinBackoff)
	case c.dialer == nil:
		return invalidOption("WithDialer: must not be nil")
	}
	return nil
}

// JoinGroupBackoff is how long this member waits before joining again after
// a failed attempt (default kafka-go's, 5s).
func JoinGroupBackoff(d time.Duration) Option {
	return kafkaopt.KafkaGoOnly(func(c *config) { c.joinBackoff = d })
}

// WithDialer sets how connections to the brokers are made: TLS, SASL,
// client ID, timeouts (default: plain TCP, 10 s connect timeout). The
// dead-letter writer uses the same TLS and SASL settings.
func WithDialer(d *kgo.Dialer) Option {
	return kafkaopt.KafkaGoOnly(func(c *config) { c.dialer = d })
}

func startOffset(r int) int64 {
	if r == kafkaopt.ResetLatest {
		return kgo.LastOffset
	}
	return kgo.FirstOffset
}
