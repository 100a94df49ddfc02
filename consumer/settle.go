package consumer

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// settleStage makes every Source call about a held message: the Ack, Nack
// or DeadLetter that carries out its outcome, the dead letter the Guard
// sends while it holds the lease (deadLetterSender), the Nack of a message
// never started, and the extensions of its delivery. Each is reported to
// the observer. It decides nothing about the message: the Guard did, and
// the pool decides what is held in place.
type settleStage struct {
	src Source
	// replayable: a settled message stays readable from the broker (a
	// Kafka log), so a dead letter kept in the store can be acked.
	replayable bool
	// keptDelay is how long a dead letter that no destination took waits
	// at the broker before it is seen again (MaxRetryDelay).
	keptDelay time.Duration
	log       *slog.Logger
	obs       *observer
}

// settle carries out o's action on m; sent is what became of a dead letter
// the Guard sent under the lease.
func (st *settleStage) settle(ctx context.Context, m *Message, o Outcome, sent heldDeadLetter) error {
	action := o.Action()
	var err error
	switch action {
	case Ack:
		err = st.src.Ack(ctx, m)
	case DeadLetter:
		err = st.settleDeadLetter(ctx, m, o, sent)
	case Retry:
		err = st.src.Nack(ctx, m, o.RetryAfter)
	}
	st.obs.settled(ctx, m, action, err)
	if err != nil && action != DeadLetter {
		st.log.WarnContext(ctx, "settle failed", "action", action.String(), slogID(m), slogErr(err))
	}
	return err
}

// settleDeadLetter settles a dead-lettered message: sent now when no lease
// was held, else as the Guard's send under the lease left it.
func (st *settleStage) settleDeadLetter(ctx context.Context, m *Message, o Outcome, sent heldDeadLetter) error {
	switch sent.fate {
	case deadLetterSent:
		// Sent and settled by the source while the lease was held.
		return nil
	case deadLetterKept:
		// Kept in the store, never to run again: released where the
		// broker keeps it readable (a Kafka log), else given back to the
		// broker's own redrive, spending a receive each time. The settle
		// counts as a failed dead letter when the copy was refused now.
		st.obs.tel.keptDead.Add(ctx, 1)
		var err error
		if st.replayable {
			err = st.src.Ack(ctx, m)
		} else {
			err = st.src.Nack(ctx, m, st.keptDelay)
		}
		return errors.Join(sent.err, err)
	case deadLetterFailed:
		return errors.Join(sent.err, st.src.Nack(ctx, m, st.keptDelay))
	}
	// No lease was held (the key could not be made, or it was reused):
	// sent now.
	err := st.src.DeadLetter(ctx, m, o.Reason())
	if err != nil {
		// No dead-letter destination took it: keep the message rather
		// than lose it, and say so loudly. It is counted as a failed dead
		// letter (settles with result "error").
		st.log.ErrorContext(ctx, "dead letter failed; message kept", slogID(m), slogKey(o.IdempotencyKey), slogErr(err))
		_ = st.src.Nack(ctx, m, st.keptDelay)
	}
	return err
}

var _ deadLetterSender = (*settleStage)(nil)

// sendDeadLetter sends m to the dead-letter destination for the Guard,
// while it holds m's lease; the settle that follows knows it from the
// Guard's heldDeadLetter.
func (st *settleStage) sendDeadLetter(ctx context.Context, m *Message, reason string) error {
	return st.src.DeadLetter(ctx, m, reason)
}

// heldInPlace reports a message the pool holds to run again instead of
// settling it: its action, with no Source call.
func (st *settleStage) heldInPlace(ctx context.Context, m *Message, a Action) {
	st.obs.settled(ctx, m, a, nil)
}

// returnUnstarted gives a message that never started back to the source at
// once.
func (st *settleStage) returnUnstarted(ctx context.Context, m *Message) error {
	err := st.src.Nack(ctx, m, 0)
	st.obs.settled(ctx, m, Retry, err)
	return err
}

// extendDelivery extends m's delivery at the source by d.
func (st *settleStage) extendDelivery(ctx context.Context, m *Message, d time.Duration) error {
	err := st.src.Extend(ctx, m, d)
	st.obs.heartbeat(ctx, m, false, err)
	return err
}
