package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/onceq/onceq/dedup"
	"go.opentelemetry.io/otel/metric"
)

// recall is a record of key this Guard completed or found completed
// lately, when the cache is on.
func (g *Guard) recall(key string, now time.Time) (dedup.Record, bool) {
	if g.completed == nil {
		return dedup.Record{}, false
	}
	return g.completed.Get(key, now)
}

// claim takes the lease on the message's key, at now; held is false when
// the message goes no further than o (its key is held or done elsewhere,
// it is dead-lettered before it runs, or the caller stopped).
func (a *attempt) claim(now time.Time) (o Outcome, held bool) {
	g := a.g
	req := dedup.ClaimRequest{Key: a.o.IdempotencyKey, PayloadHash: a.hash, Owner: g.nextOwner(),
		Now: now, LeaseUntil: now.Add(g.cfg.leaseTTL), SkewMargin: g.cfg.skewMargin}
	var c dedup.Claim
	err := a.storeCall(opClaim, func(ctx context.Context) (err error) {
		c, err = g.store.Claim(ctx, req)
		return err
	})
	if err != nil {
		return a.storeFailed("claim", err), false
	}
	if !c.Acquired {
		g.remember(req.Key, c.Existing, now)
		return a.existing(now, c.Existing, c.Archived), false
	}
	a.expiredPresent(c.Previous)
	a.lease, a.runs, a.o.Attempt = c.Lease, c.Attempt, c.Attempt
	if c.Attempt > g.cfg.maxAttempts {
		// The record counts more failed runs than this worker allows (a
		// lower MaxAttempts than the worker that counted them).
		return a.deadLetter(fmt.Errorf("%w: %d attempts", ErrAttemptsExhausted, c.Attempt-1)), false
	}
	if c.Takeovers > g.cfg.maxTakeovers {
		// Decided before the handler runs: it would most likely end this
		// process too.
		return a.deadLetter(fmt.Errorf("%w: its lease was abandoned %d times, more than MaxTakeovers %d (the handler ended its process or ran past its lease)",
			ErrTakeoversExhausted, c.Takeovers, g.cfg.maxTakeovers)), false
	}
	if a.ctx.Err() != nil {
		return a.refund(Retrying, fmt.Errorf("consumer: stopped before the handler ran: %w", a.ctx.Err())), false
	}
	return Outcome{}, true
}

// existing decides what a live record held by someone else means.
func (a *attempt) existing(now time.Time, r dedup.Record, archived bool) Outcome {
	o := a.o
	// Two empty hashes: the key covers the body, so the same key is the
	// same payload.
	if !a.g.cfg.noPayloadCheck && hashesDiffer(r.PayloadHash, a.hash) {
		o.Kind, o.Err = KeyReuse, &dedup.KeyReuseError{Key: o.IdempotencyKey, Existing: r}
		return o
	}
	switch r.Status {
	case dedup.StatusCompleted:
		o.Kind, o.Response, o.Archived = Duplicate, r.Response, archived
	case dedup.StatusDeadLetter:
		// Judged poison before, and kept here as no destination took it:
		// never run again; the source releases it.
		o.Kind, a.sent.fate = DeadLettered, deadLetterKept
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

// expiredPresent reports a claim that took over prev, an expired record
// still stored (nil when the key was absent), in either store mode.
func (a *attempt) expiredPresent(prev *dedup.Record) {
	if prev == nil {
		return
	}
	a.g.obs.tel.expired.Add(a.ctx, 1, metric.WithAttributes(attrPreviousStatus.String(string(prev.Status))))
	if prev.Status == dedup.StatusPending {
		// An expired lease still in place: its holder abandoned it.
		a.g.obs.tel.takeover(a.ctx, a.m)
	}
	for _, h := range a.g.obs.hooks.expired {
		h.OnClaimExpiredPresent(a.ctx, a.m, string(prev.Status))
	}
}

// remember caches r, a record of key known at now, when the cache is on
// (only a COMPLETED record is kept), so that a duplicate of key is
// answered with no store call.
func (g *Guard) remember(key string, r dedup.Record, now time.Time) {
	if g.completed != nil {
		g.completed.Put(key, r, now)
	}
}
