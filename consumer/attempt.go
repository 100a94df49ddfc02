package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/retry"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ErrHandlerOverran is the cause when a handler returned after its lease
// could have been taken over: it ignored its context past HandlerTimeout
// and the grace, renewals had stopped, and its result is not committed.
var ErrHandlerOverran = errors.New("consumer: handler returned after its lease could have ended; result not committed")

// attempt is one message's way through the guard, in either store mode:
// claim → handler → complete, or handler → claim-and-complete in one call
// (OneRoundTrip). Its methods share one rule for contexts: ctx bounds the
// handler and ends when the caller stops; each store call gets its own
// context when it starts (storeCtx), which outlives ctx so that a drain can
// still record its work.
type attempt struct {
	g    *Guard
	m    *Message
	ctx  context.Context
	span trace.Span // the processing span, parent of the store calls'
	tr   leaseTracker
	// now is the latest clock reading: each stage reads the clock once,
	// as it ends, and the next stage starts from that reading.
	now time.Time
	// looked: the key was looked up in the COMPLETED cache already, so
	// the claim goes past it to the store.
	looked bool
	hash   string
	// lease is the held claim (zero in one-round-trip mode, where the
	// record is written only once the handler has run).
	lease dedup.Lease
	o     Outcome
}

// attempt runs m from now on and returns its outcome and the time of the
// last clock reading it made.
func (g *Guard) attempt(ctx context.Context, span trace.Span, m *Message, tr leaseTracker, now time.Time) (Outcome, time.Time) {
	key, hash, err := g.keys(m)
	if err != nil {
		return Outcome{Kind: DeadLettered, Err: err}, now
	}
	m.IdempotencyKey = key
	a := &attempt{g: g, m: m, ctx: ctx, span: span, tr: tr, now: now, hash: hash, o: Outcome{IdempotencyKey: key}}
	if g.completed != nil {
		// A duplicate of a key completed here lately makes no store call.
		recNow := g.recordTime(now)
		if r, ok := g.completed.CompletedString(key, recNow); ok {
			return a.existing(recNow, r), now
		}
		a.looked = true
	}
	if a.tr == nil {
		hb := &selfHeartbeat{g: g, parent: context.WithoutCancel(ctx)}
		defer hb.unleased()
		a.tr = hb
	}
	var o Outcome
	if g.oneShot != nil {
		o = a.oneRoundTrip()
	} else {
		o = a.claimFirst()
	}
	return o, a.now
}

func (a *attempt) claimFirst() Outcome {
	g := a.g
	now := g.recordTime(a.now)
	sctx, done := a.storeCtx()
	defer done()
	cctx, span := g.tel.beginStore(sctx, opClaim)
	req := dedup.ClaimRequest{Key: a.o.IdempotencyKey, PayloadHash: a.hash, Owner: g.nextOwner(),
		Now: now, LeaseUntil: now.Add(g.cfg.leaseTTL), SkewMargin: g.cfg.skewMargin}
	var c dedup.Claim
	var err error
	if a.looked {
		c, err = g.completed.ClaimMissed(cctx, req)
	} else {
		c, err = g.store.Claim(cctx, req)
	}
	a.now = g.tel.endStore(cctx, span, opClaim, a.now, err)
	if err != nil {
		return a.storeFailed("claim", err)
	}
	if !c.Acquired {
		o := a.existing(now, c.Existing)
		o.Archived = c.Archived && o.Kind == Duplicate
		return o
	}
	a.expiredPresent(c.Previous)
	a.lease, a.o.Attempt = c.Lease, c.Attempt
	if c.Attempt > g.cfg.maxAttempts {
		// The record counts more failed runs than this worker allows (a
		// lower MaxAttempts than the worker that counted them).
		return a.deadLetter(fmt.Errorf("%w: %d attempts", ErrAttemptsExhausted, c.Attempt-1))
	}
	if a.ctx.Err() != nil {
		return a.giveBack(Retrying, fmt.Errorf("consumer: stopped before the handler ran: %w", a.ctx.Err()))
	}
	res, err := a.runHandler()
	if err != nil {
		return a.handlerFailed(err)
	}
	return a.commit(res, func(resp []byte, writes []any, now time.Time) (dedup.Claim, error) {
		req := dedup.CompleteRequest{Lease: a.lease, Response: resp, Now: now, ExpiresAt: now.Add(g.cfg.retention), Writes: writes}
		sctx, done := a.storeCtx()
		defer done()
		return dedup.Claim{Acquired: true}, a.storeComplete(sctx, req)
	})
}

func (a *attempt) oneRoundTrip() Outcome {
	g := a.g
	a.o.Attempt = a.m.Deliveries
	res, err := a.runHandler()
	if err != nil {
		return a.handlerFailed(err)
	}
	return a.commit(res, func(resp []byte, writes []any, now time.Time) (dedup.Claim, error) {
		req := dedup.ClaimCompleteRequest{Key: a.o.IdempotencyKey, PayloadHash: a.hash, Owner: g.nextOwner(), Response: resp,
			Now: now, ExpiresAt: now.Add(g.cfg.retention), Writes: writes, SkewMargin: g.cfg.skewMargin}
		sctx, done := a.storeCtx()
		defer done()
		return a.storeClaimComplete(sctx, req)
	})
}

// runHandler calls the handler under HandlerTimeout, its lease (if any)
// renewed meanwhile, and refuses a result returned after renewals stopped.
func (a *attempt) runHandler() (Result, error) {
	g := a.g
	start := a.now
	hctx := a.tr.handlerContext(a.ctx, g.cfg.handlerTimeout, start)
	if a.lease.Owner != "" {
		a.tr.leased(a.lease, start)
	}
	res, end, err := g.callHandler(hctx, a.m, start)
	a.now = end
	a.tr.unleased()
	a.tr.handlerDone()
	if err == nil && a.lease.Owner != "" && end.Sub(start) > g.cfg.renewFor() {
		return Result{}, ErrHandlerOverran
	}
	return res, err
}

// handlerFailed decides what a handler error means for the message.
func (a *attempt) handlerFailed(herr error) Outcome {
	g := a.g
	a.o.Err = herr
	switch {
	case errors.Is(herr, ErrHandlerOverran):
		o := a.recordFailure(herr, g.retryDelay(a.o.Attempt), false, false)
		if o.Kind == Retrying {
			o.Kind = LeaseLost // its result is refused, like a fenced worker's
		}
		return o
	case a.ctx.Err() != nil:
		// Stopped by shutdown: not the message's fault.
		return a.giveBack(Retrying, herr)
	case errors.Is(herr, ErrPermanent):
		return a.deadLetter(herr)
	case a.o.Attempt >= g.cfg.maxAttempts:
		return a.deadLetter(fmt.Errorf("%w after %d: %w", ErrAttemptsExhausted, a.o.Attempt, herr))
	}
	return a.recordFailure(herr, g.retryDelay(a.o.Attempt), false, false)
}

// commit writes the handler's result with write (Complete, or
// ClaimComplete), and when a business write's own condition refuses it,
// writes the refusal instead: the message is then Rejected, for good.
func (a *attempt) commit(res Result, write writeFunc) Outcome {
	g := a.g
	kind, resp, writes := Processed, res.Response, res.Writes
	if res.Rejected {
		kind, writes = Rejected, nil
	}
	now := g.recordTime(a.now)
	c, err := a.writeHeld(write, resp, writes, now)
	be := businessError(err)
	if be != nil {
		kind, resp = Rejected, res.RejectResponse
		c, err = a.writeHeld(write, resp, nil, now)
	}
	switch {
	case err == nil && a.lease.Owner == "" && !c.Acquired:
		o := a.existing(now, c.Existing) // one round trip found a live record
		o.Archived = c.Archived && o.Kind == Duplicate
		return o
	case err == nil:
		a.o.Kind, a.o.Response = kind, resp
		if a.lease.Owner == "" {
			// One round trip: the claim happened only now.
			if c.Attempt > 0 {
				a.o.Attempt = c.Attempt
			}
			a.expiredPresent(c.Previous)
		}
		if be != nil {
			a.o.Err = be
		}
		return a.o
	case errors.Is(err, dedup.ErrLeaseLost):
		a.o.Kind, a.o.Err, a.o.RetryAfter = LeaseLost, err, g.cfg.pendingRecheck
		return a.o
	}
	return a.storeFailed("complete", err)
}

// writeFunc commits a result: resp cached, writes applied, at now.
type writeFunc func(resp []byte, writes []any, now time.Time) (dedup.Claim, error)

// writeHeld calls write and, while the store is out, the lease still
// holds and ctx has not ended, calls it again: a handler that succeeded
// need not run again for an outage shorter than its lease. (Without a
// lease, in one round trip, the message is simply given back.) The waits
// watch ctx, so that a drain ends on time; the store calls themselves are
// bounded by their own deadlines.
func (a *attempt) writeHeld(write writeFunc, resp []byte, writes []any, now time.Time) (dedup.Claim, error) {
	g := a.g
	c, err := write(resp, writes, now)
	if a.lease.Owner == "" || err == nil {
		return c, err
	}
	// Renewals stop with the handler; the last came at most a third of
	// the lease ago.
	until := time.Now().Add(2*g.cfg.leaseTTL/3 - g.cfg.skewMargin)
	retried := false
	for n := 1; err != nil && faultOf(err) == outage; n++ {
		wait := g.retryDelay(n)
		if time.Now().Add(wait).After(until) || !sleepCtx(a.ctx, wait) {
			break
		}
		retried = true
		a.now = time.Now()
		c, err = write(resp, writes, g.recordTime(a.now))
	}
	if retried && errors.Is(err, dedup.ErrLeaseLost) {
		// An earlier try may have committed with its answer lost.
		sctx, done := a.storeCtx()
		r, gerr := g.store.Get(sctx, a.lease.Key)
		done()
		if gerr == nil && r.Owner == a.lease.Owner && r.Status == dedup.StatusCompleted {
			return dedup.Claim{Acquired: true}, nil
		}
	}
	return c, err
}

// sleepCtx waits d, or until ctx ends; it says whether the wait ran out.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// expiredPresent reports a claim that took over prev, an expired record
// still stored (nil when the key was absent), in either store mode.
func (a *attempt) expiredPresent(prev *dedup.Record) {
	if prev == nil {
		return
	}
	a.g.tel.expired.Add(a.ctx, 1, metric.WithAttributes(attrPreviousStatus.String(string(prev.Status))))
	for _, h := range a.g.hooks.expired {
		h.OnClaimExpiredPresent(a.ctx, a.m, string(prev.Status))
	}
}

// storeCtx is the context of one store call, made as it starts.
func (a *attempt) storeCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := a.tr.storeContext(a.now)
	if a.span.IsRecording() {
		ctx = trace.ContextWithSpan(ctx, a.span)
	}
	return ctx, cancel
}

// existing decides what a live record held by someone else means.
func (a *attempt) existing(now time.Time, r dedup.Record) Outcome {
	o := a.o
	o.Attempt = r.Attempts
	// Two empty hashes: the key covers the body, so the same key is the
	// same payload.
	if !a.g.cfg.noPayloadCheck && hashesDiffer(r.PayloadHash, a.hash) {
		o.Kind, o.Err = KeyReuse, &dedup.KeyReuseError{Key: o.IdempotencyKey, Existing: r}
		return o
	}
	switch r.Status {
	case dedup.StatusCompleted:
		o.Kind, o.Response = Duplicate, r.Response
	case dedup.StatusDeadLetter:
		// Judged poison before, and kept here as no destination took it:
		// never run again; the source releases it.
		o.Kind, o.deadLetter = DeadLettered, deadLetterKept
		o.Err = fmt.Errorf("consumer: kept as a dead letter: %s", r.LastError)
	case dedup.StatusFailed:
		// Back once the record can be claimed (stores keep whole seconds).
		o.Kind, o.Err = Retrying, fmt.Errorf("consumer: previous attempt failed: %s", r.LastError)
		o.RetryAfter = max(dedup.ClaimableAt(r.ExpiresAt).Sub(now), 100*time.Millisecond)
	default:
		// Back when the holder's lease can have ended, its clock allowed
		// for: at most two deliveries per lease period while it lives.
		o.Kind, o.Err = InFlightElsewhere, fmt.Errorf("consumer: key held by another worker until %v", r.ExpiresAt.UTC().Format(time.RFC3339))
		o.RetryAfter = max(dedup.ClaimableAt(r.ExpiresAt).Add(a.g.cfg.skewMargin).Sub(now), 100*time.Millisecond)
	}
	return o
}

// storeFailed sorts a store error by whose fault it is.
func (a *attempt) storeFailed(op string, err error) Outcome {
	err = fmt.Errorf("consumer: %s: %w", op, err)
	switch faultOf(err) {
	case messageFault:
		return a.deadLetter(err)
	case configFault:
		return a.giveBack(Misconfigured, fmt.Errorf("%w: %w", ErrMisconfigured, err))
	}
	return a.giveBack(StoreUnavailable, err)
}

type fault int

const (
	outage       fault = iota // transient: hold the message, spend nothing
	messageFault              // the message's own: dead-letter it
	configFault               // the deployment's: stop, blame no message
	decided                   // not a fault: a fence or a condition said no
)

// faultOf says whose fault a store error is: the one place the consumer
// decides it.
func faultOf(err error) fault {
	switch {
	case errors.Is(err, dedup.ErrLeaseLost), businessError(err) != nil:
		return decided
	case errors.Is(err, dedup.ErrRecordTooLarge), errors.Is(err, dedup.ErrTooManyWrites),
		errors.Is(err, dedup.ErrUnsupportedWrite), errors.Is(err, dedup.ErrEmptyKey):
		return messageFault
	}
	switch retry.Classify(err) {
	case retry.Misconfigured:
		return configFault
	case retry.Permanent:
		return messageFault // a request built from the message is invalid
	}
	return outage
}

// deadLetter records a final failure: the attempt count is reset, so a
// redrive from the dead-letter destination starts afresh.
func (a *attempt) deadLetter(cause error) Outcome {
	return a.recordFailure(cause, 0, true, false)
}

// giveBack returns the message without spending an attempt, as kind: the
// record is freed at once when it can be (and simply expires otherwise).
func (a *attempt) giveBack(kind Kind, cause error) Outcome {
	o := a.recordFailure(cause, 0, false, true)
	if o.Kind == Retrying {
		o.Kind = kind
		if kind != Retrying {
			o.RetryAfter = a.g.cfg.failedRetryDelay
		}
	}
	return o
}

// sendDeadLetter sends the message to the dead-letter destination while
// the lease is held. When no destination takes the copy, req becomes the
// DEAD_LETTER record that keeps it, with the reason and what the send said,
// until Retention ends: the handler never runs again for it, and the
// message can be released.
func (a *attempt) sendDeadLetter(ctx context.Context, o Outcome, req *dedup.FailRequest) (deadLetterFate, error) {
	err := a.tr.deadLetter(ctx, o.Reason())
	switch {
	case err == nil:
		return deadLetterSent, nil
	case errors.Is(err, errDeadLetterLater):
		return deadLetterUnsent, nil
	}
	g := a.g
	g.cfg.logger.ErrorContext(a.ctx, "dead letter not sent; kept in the store as DEAD_LETTER (onceq inspect shows it)",
		slogID(a.m), slogKey(o.IdempotencyKey), slogErr(err))
	req.DeadLetter, req.ResetAttempts, req.RetryAt = true, true, req.Now.Add(g.cfg.retention)
	req.Reason = truncate(fmt.Sprintf("dead letter of message %s not sent (%v): %s", a.m.ID, err, req.Reason), 1024)
	return deadLetterKept, err
}

// recordFailure records a failed attempt, when a lease is held, and says
// what becomes of the message: dead-lettered when final, else back after
// delay. refund gives the claim's attempt back.
func (a *attempt) recordFailure(cause error, delay time.Duration, final, refund bool) Outcome {
	g := a.g
	o := a.o
	o.Err = cause
	held := a.lease.Owner != ""
	var retryAt time.Time
	if held {
		now := g.recordTime(a.now)
		sctx, done := a.storeCtx()
		defer done()
		req := dedup.FailRequest{Lease: a.lease, Reason: truncate(cause.Error(), 1024), Now: now,
			RetryAt: now.Add(delay), ResetAttempts: final, RefundAttempt: refund}
		if final {
			o.Kind = DeadLettered
			o.deadLetter, o.deadLetterErr = a.sendDeadLetter(sctx, o, &req)
		}
		fctx, span := g.tel.beginStore(sctx, opFail)
		retryAt = req.RetryAt
		err := g.store.Fail(fctx, req)
		a.now = g.tel.endStore(fctx, span, opFail, a.now, err)
		if err != nil && o.deadLetter == deadLetterKept {
			// Neither the destination nor the store took it: the message
			// stays with the broker, as before there was a store to keep it.
			g.cfg.logger.ErrorContext(a.ctx, "dead letter not sent and not kept in the store", slogID(a.m), slogKey(o.IdempotencyKey), slogErr(err))
			o.deadLetter = deadLetterFailed
		}
		if errors.Is(err, dedup.ErrLeaseLost) && o.deadLetter == deadLetterUnsent {
			o.Kind, o.Err, o.RetryAfter = LeaseLost, fmt.Errorf("%w (while failing: %w)", err, cause), g.cfg.pendingRecheck
			return o
		}
		// A Fail that did not land is no reason to keep the message from
		// its fate: the lease then simply expires.
	}
	if final {
		o.Kind = DeadLettered
		return o
	}
	o.Kind, o.RetryAfter = Retrying, delay
	if held && delay > 0 {
		// Back when the FAILED record can be claimed, not before: a
		// delivery that found it still FAILED would cost a receive.
		o.RetryAfter = max(dedup.ClaimableAt(retryAt).Sub(g.recordTime(a.now)), delay)
	}
	return o
}

func (a *attempt) storeComplete(ctx context.Context, req dedup.CompleteRequest) error {
	op := opComplete
	if len(req.Writes) > 0 {
		op = opTransaction
	}
	ctx, span := a.g.tel.beginStore(ctx, op)
	err := a.g.store.Complete(ctx, req)
	a.now = a.g.tel.endStore(ctx, span, op, a.now, err)
	return err
}

func (a *attempt) storeClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	ctx, span := a.g.tel.beginStore(ctx, opClaimComplete)
	var c dedup.Claim
	var err error
	if a.looked {
		c, err = a.g.completed.ClaimCompleteMissed(ctx, req)
	} else {
		c, err = a.g.oneShot.ClaimComplete(ctx, req)
	}
	a.now = a.g.tel.endStore(ctx, span, opClaimComplete, a.now, err)
	return c, err
}

// businessError is err's *dedup.BusinessConditionError, if any. The
// errors.As target escapes, so it is only made when there is an error.
func businessError(err error) *dedup.BusinessConditionError {
	if err == nil {
		return nil
	}
	var be *dedup.BusinessConditionError
	if errors.As(err, &be) {
		return be
	}
	return nil
}
