package kafkacore

import (
	"context"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/kafkaopt"
	"github.com/onceq/onceq/internal/logref"
)

// Methods are the methods of a Kafka source's broker.Source that no
// client changes: Capabilities, Ack, Nack, DeadLetter and Extend, carried
// out by a Dispatcher. Both sources embed them, so that they are written
// once; what they do is documented, for users, in package kafkagroup.
type Methods[R, X any] struct {
	d    *Dispatcher[R, X]
	set  *kafkaopt.Settings
	logs *logref.Ref
}

// Capabilities declares the configured ordering, Fingerprint as the
// default key and no delivery timeout (see package kafkagroup).
func (m Methods[R, X]) Capabilities() broker.Capabilities {
	return broker.Capabilities{Ordering: m.set.Ordering, DefaultKey: Fingerprint, KeyCoversBody: KeyCoversBody,
		DeadLetter: m.set.DeadLetterTopic != "", Replayable: true, LimitCommitHold: m.d.LimitHold, InheritLogger: m.logs.Inherit}
}

// Ack is [Dispatcher.Ack].
func (m Methods[R, X]) Ack(ctx context.Context, msg *broker.Message) error { return m.d.Ack(ctx, msg) }

// Nack is [Dispatcher.Nack].
func (m Methods[R, X]) Nack(ctx context.Context, msg *broker.Message, delay time.Duration) error {
	return m.d.Nack(ctx, msg, delay)
}

// DeadLetter is [Dispatcher.DeadLetter].
func (m Methods[R, X]) DeadLetter(ctx context.Context, msg *broker.Message, reason string) error {
	return m.d.DeadLetter(ctx, msg, reason)
}

// Extend does nothing: Kafka deliveries do not time out.
func (Methods[R, X]) Extend(context.Context, *broker.Message, time.Duration) error { return nil }
