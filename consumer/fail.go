package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq/dedup"
)

// handlerFailed decides what a handler error means for the message.
func (a *attempt) handlerFailed(herr error) Outcome {
	g := a.g
	a.o.Err = herr
	switch {
	case errors.Is(herr, ErrHandlerOverran):
		o := a.recordFailure(herr, retryLater, g.cfg.retryDelay(a.runs))
		if o.Kind == Retrying {
			o.Kind = LeaseLost // its result is refused, like a fenced worker's
		}
		return o
	case a.ctx.Err() != nil:
		// Stopped by shutdown: not the message's fault.
		return a.refund(Retrying, herr)
	case errors.Is(herr, ErrPermanent):
		return a.deadLetter(herr)
	case a.runs >= g.cfg.maxAttempts:
		return a.deadLetter(fmt.Errorf("%w after %d: %w", ErrAttemptsExhausted, a.runs, herr))
	}
	return a.recordFailure(herr, retryLater, g.cfg.retryDelay(a.runs))
}

// storeFailed sorts a store error by whose fault it is.
func (a *attempt) storeFailed(op string, err error) Outcome {
	err = fmt.Errorf("consumer: %s: %w", op, err)
	switch faultOf(err) {
	case messageFault:
		return a.deadLetter(err)
	case configFault:
		return a.refund(Misconfigured, fmt.Errorf("%w: %w", ErrMisconfigured, err))
	}
	return a.refund(StoreUnavailable, err)
}

// deadLetter records a final failure: the attempt count is reset, so a
// redrive from the dead-letter destination starts afresh.
func (a *attempt) deadLetter(cause error) Outcome {
	return a.recordFailure(cause, deadLettered, 0)
}

// refund returns the message without spending an attempt, as kind: the
// record is freed at once when it can be (and simply expires otherwise).
func (a *attempt) refund(kind Kind, cause error) Outcome {
	o := a.recordFailure(cause, refunded, 0)
	if o.Kind == Retrying {
		o.Kind = kind
		if kind != Retrying {
			o.RetryAfter = a.g.cfg.failedRetryDelay
		}
	}
	return o
}

// failFate is what a failed attempt makes of the message.
type failFate uint8

const (
	// retryLater spends an attempt: the message comes back after the delay.
	retryLater failFate = iota
	// deadLettered is final: the message goes to the dead-letter
	// destination (or is kept in the store as DEAD_LETTER), and the
	// attempt count is reset, so a redrive starts afresh.
	deadLettered
	// refunded gives the claim's attempt back: the failure was not the
	// message's (a shutdown, an outage), so it comes back uncounted.
	refunded
)

// recordFailure records a failed attempt, when a lease is held, and says
// what becomes of the message, as fate decides; delay is retryLater's.
func (a *attempt) recordFailure(cause error, fate failFate, delay time.Duration) Outcome {
	g := a.g
	o := a.o
	o.Err = cause
	held := a.lease.Owner != ""
	var retryAt time.Time
	if held {
		now := g.cfg.clock.Now()
		req := dedup.FailRequest{Lease: a.lease, Reason: dedup.StorableReason(cause.Error()), Now: now,
			RetryAt: now.Add(delay), ResetAttempts: fate == deadLettered, RefundAttempt: fate == refunded}
		if fate == deadLettered {
			o.Kind = DeadLettered
			a.sent = a.sendDeadLetter(o, &req)
		}
		retryAt = req.RetryAt
		err := a.storeCall(opFail, func(ctx context.Context) error { return g.store.Fail(ctx, req) })
		if err != nil && faultOf(err) == messageFault {
			// The store refused what the request carries, its reason
			// most likely: recorded again with a plain one, so that the
			// failed run counts.
			g.cfg.logger.WarnContext(a.ctx, "the store refused a failure record; recording it with a plain reason",
				slogID(a.m), slogKey(o.IdempotencyKey), slogErr(err))
			req.Reason = plainReason
			if req.DeadLetter {
				req.Reason = plainDeadLetterReason
			}
			err = a.storeCall(opFail, func(ctx context.Context) error { return g.store.Fail(ctx, req) })
			if err != nil && faultOf(err) == messageFault && fate == retryLater {
				// Still refused: the store cannot count this message's
				// failed runs, so it is dead-lettered now rather than
				// taken over and run again, uncounted, for ever. (A
				// refunded failure counts nothing anyway: the message
				// keeps the fate it was given.)
				fate = deadLettered
				o.Err = fmt.Errorf("consumer: the store refused to record a failed run, so its attempts cannot be counted (%w); the run failed: %w", err, cause)
			}
		}
		if err != nil && a.sent.fate == deadLetterKept {
			// Neither the destination nor the store took it: the message
			// stays with the broker, as before there was a store to keep it.
			g.cfg.logger.ErrorContext(a.ctx, "dead letter not sent and not kept in the store", slogID(a.m), slogKey(o.IdempotencyKey), slogErr(err))
			a.sent.fate = deadLetterFailed
		}
		if errors.Is(err, dedup.ErrLeaseLost) && a.sent.fate == deadLetterUnsent {
			o.Kind, o.Err, o.RetryAfter = LeaseLost, fmt.Errorf("%w (while failing: %w)", err, cause), g.cfg.pendingRecheck
			return o
		}
		if err != nil && faultOf(err) == configFault && a.sent.fate == deadLetterUnsent && fate != deadLettered {
			// The deployment's fault, not the message's: given back, and a
			// Consumer stops.
			o.Kind, o.RetryAfter = Misconfigured, g.cfg.failedRetryDelay
			o.Err = fmt.Errorf("%w: consumer: fail: %w (the run failed: %v)", ErrMisconfigured, err, cause)
			return o
		}
		// A Fail that did not land for an outage is no reason to keep the
		// message from its fate: the lease then simply expires.
	}
	if fate == deadLettered {
		o.Kind = DeadLettered
		return o
	}
	o.Kind, o.RetryAfter = Retrying, delay
	if held && delay > 0 {
		// Back when the FAILED record can be claimed, not before: a
		// delivery that found it still FAILED would cost a receive.
		o.RetryAfter = max(dedup.ClaimableAt(retryAt).Sub(g.cfg.clock.Now()), delay)
	}
	return o
}

// sendDeadLetter sends the message to the dead-letter destination through
// the settle stage while the lease is held (a Guard's caller sends it
// later, from the outcome). When no destination takes the copy, req
// becomes the DEAD_LETTER record that keeps it, with the reason and what
// the send said, until Retention ends: the handler never runs again for
// it, and the message can be released.
func (a *attempt) sendDeadLetter(o Outcome, req *dedup.FailRequest) heldDeadLetter {
	if a.run == nil || a.run.settle == nil {
		return heldDeadLetter{fate: deadLetterUnsent}
	}
	ctx, cancel := a.storeCtx(time.Now())
	defer cancel()
	err := a.run.settle.sendDeadLetter(ctx, a.m, o.Reason())
	if err == nil {
		return heldDeadLetter{fate: deadLetterSent}
	}
	g := a.g
	g.cfg.logger.ErrorContext(a.ctx, "dead letter not sent; kept in the store as DEAD_LETTER (onceq inspect shows it)",
		slogID(a.m), slogKey(o.IdempotencyKey), slogErr(err))
	req.DeadLetter, req.ResetAttempts, req.RetryAt = true, true, req.Now.Add(g.cfg.retention)
	req.Reason = dedup.StorableReason(fmt.Sprintf("dead letter of message %s not sent (%v): %s", a.m.ID, err, req.Reason))
	return heldDeadLetter{fate: deadLetterKept, err: err}
}

// The reasons a Fail carries when the store refused the one it was given.
const (
	plainReason           = "the run failed; the store refused the text of its error (see the worker's log)"
	plainDeadLetterReason = "dead letter not sent and kept here; the store refused the text of its reason (see the worker's log)"
)
