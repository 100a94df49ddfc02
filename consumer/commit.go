package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/outbox"
)

// commit writes the handler's result (Complete under the lease, or
// ClaimComplete in one round trip), and when a business write's own
// condition refuses it, writes the refusal instead: the message is then
// Rejected, for good. A rejected message sends nothing onward.
func (a *attempt) commit(res Result) Outcome {
	kind, resp, writes, out := Processed, res.Response, res.Writes, res.Outbox
	if res.Rejected {
		kind, writes, out = Rejected, nil, nil
	}
	now := a.g.cfg.clock.Now()
	c, err := a.writeHeld(resp, writes, out, now)
	be := businessError(err)
	if be != nil {
		kind, resp = Rejected, res.RejectResponse
		c, err = a.writeHeld(resp, nil, nil, now)
	}
	switch {
	case err == nil && !c.Acquired:
		a.g.remember(a.o.IdempotencyKey, c.Existing, now)
		return a.existing(now, c.Existing, c.Archived) // one round trip found a live record
	case err == nil:
		a.o.Kind, a.o.Response = kind, resp
		lease := a.lease
		if a.g.oneShot {
			// One round trip: the claim happened only now. A won claim is
			// at least the first attempt, though a store may not say
			// (DynamoDB with Writes, for a new key).
			a.o.Attempt = max(c.Attempt, 1)
			a.expiredPresent(c.Previous)
			lease = c.Lease
		} else {
			lease.Version++ // Complete moved the record on
		}
		a.g.remember(a.o.IdempotencyKey, dedup.Record{Status: dedup.StatusCompleted, Version: lease.Version, Owner: lease.Owner,
			PayloadHash: a.hash, Response: resp, Attempts: a.o.Attempt, CreatedAt: now, ExpiresAt: now.Add(a.g.cfg.retention)}, now)
		if be != nil {
			a.o.Err = be
		}
		return a.o
	case errors.Is(err, dedup.ErrLeaseLost):
		a.o.Kind, a.o.Err, a.o.RetryAfter = LeaseLost, err, a.g.cfg.pendingRecheck
		return a.o
	}
	return a.storeFailed("complete", err)
}

// writeHeld writes and, while the store is out, the lease still holds and
// the handler's context has not ended, writes again: a handler that
// succeeded need not run again for an outage shorter than its lease.
// (Without a lease, in one round trip, the message is simply given back.)
// The waits watch the context, so that a drain ends on time; the store
// calls themselves are bounded by their own deadlines.
func (a *attempt) writeHeld(resp []byte, writes []dedup.Write, out []outbox.Message, now time.Time) (dedup.Claim, error) {
	g := a.g
	c, err := a.write(resp, writes, out, now)
	if g.oneShot || err == nil {
		return c, err
	}
	// Renewals stop with the handler; the last came at most a third of
	// the lease ago.
	until := time.Now().Add(2*g.cfg.leaseTTL/3 - g.cfg.skewMargin)
	retried := false
	for n := 1; err != nil && faultOf(err) == outage; n++ {
		wait := g.cfg.retryDelay(n)
		if time.Now().Add(wait).After(until) {
			break
		}
		g.obs.mon.storeRetry(a.ctx, err, wait, time.Now())
		if !sleepCtx(a.ctx, wait) {
			break
		}
		retried = true
		c, err = a.write(resp, writes, out, g.cfg.clock.Now())
	}
	if retried && errors.Is(err, dedup.ErrLeaseLost) {
		// An earlier try may have committed with its answer lost.
		ctx, cancel := a.storeCtx(time.Now())
		r, gerr := g.store.Get(ctx, a.lease.Key)
		cancel()
		if gerr == nil && r.Owner == a.lease.Owner && r.Status == dedup.StatusCompleted {
			return dedup.Claim{Acquired: true}, nil
		}
	}
	return c, err
}

// write commits a result once: resp cached, writes applied, out kept to
// send onward, at now.
func (a *attempt) write(resp []byte, writes []dedup.Write, out []outbox.Message, now time.Time) (c dedup.Claim, err error) {
	g := a.g
	if err := g.writes.check(writes); err != nil {
		return dedup.Claim{}, err
	}
	if err := g.outbox.check(len(out)); err != nil {
		return dedup.Claim{}, err
	}
	// An outgoing message no Sender could deliver would fail at the relay
	// for ever: the handler's fault, refused before anything commits, and
	// the message dead-lettered (an *outbox.UndeliverableError, retry
	// class Permanent).
	if err := outbox.CheckMessages(out); err != nil {
		return dedup.Claim{}, err
	}
	if g.oneShot {
		req := dedup.ClaimCompleteRequest{Key: a.o.IdempotencyKey, PayloadHash: a.hash, Owner: g.nextOwner(), Response: resp,
			Now: now, ExpiresAt: now.Add(g.cfg.retention), Writes: writes, SkewMargin: g.cfg.skewMargin, Outbox: out}
		err = a.storeCall(opClaimComplete, func(ctx context.Context) (err error) {
			c, err = g.store.ClaimComplete(ctx, req)
			return err
		})
		return c, err
	}
	op := opComplete
	if len(writes) > 0 || len(out) > 0 {
		op = opTransaction
	}
	req := dedup.CompleteRequest{Lease: a.lease, Response: resp, Now: now, ExpiresAt: now.Add(g.cfg.retention), Writes: writes, Outbox: out}
	err = a.storeCall(op, func(ctx context.Context) error { return g.store.Complete(ctx, req) })
	return dedup.Claim{Acquired: true}, err
}

// sleepCtx waits d, or until ctx ends; it says whether the wait ran out.
func sleepCtx(ctx context.Context, d time.Duration) bool { return waitFor(ctx.Done(), d) }

// waitFor waits d, or until done is closed; it says whether the wait ran
// out.
func waitFor(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
