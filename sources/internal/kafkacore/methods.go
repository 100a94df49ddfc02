package kafkacore

import (
	"context"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/logref"
	"github.com/onceq/onceq/sources/internal/kafkaopt"
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
// default key (broker.KeyFromRecord; the consumer's WithKeyFunc still
// wins), whether a dead-letter topic is set, and that a settled record
// stays readable. Deliveries never time out: a record stays with this
// member until its partition is revoked.
func (m Methods[R, X]) Capabilities() broker.Capabilities {
	return broker.Capabilities{Ordering: m.set.Ordering, DefaultKey: broker.KeyFromRecord,
		DeadLetter: m.set.DeadLetterTopic != "", Replayable: true}
}

// Attach implements broker.Source: the Source logs to rt.Logger unless
// WithLogger gave it one, and an unfinished record may hold back its
// partition's commits for rt.CommitHold at most (see
// kafkagroup.CommitHeldError); it reports to rt.Status each failure to
// reach a broker, and the broker's answers.
func (m Methods[R, X]) Attach(rt broker.Runtime) {
	m.logs.Inherit(rt.Logger)
	m.d.LimitHold(rt.CommitHold)
	m.d.Status.Attach(rt.Status)
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
