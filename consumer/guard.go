package consumer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/cache"
	"github.com/onceq/onceq/retry"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ErrAttemptsExhausted is the dead-letter cause once MaxAttempts is reached.
var ErrAttemptsExhausted = errors.New("consumer: attempts exhausted")

// ErrTakeoversExhausted is the dead-letter cause once a message's lease
// was abandoned more than MaxTakeovers times: its handler keeps ending
// the process that runs it, or running past its lease.
var ErrTakeoversExhausted = errors.New("consumer: takeovers exhausted")

// ErrHandlerOverran is the cause when a handler returned after its lease
// could have been taken over: it ignored its context past HandlerTimeout
// and the grace, renewals had stopped, and its result is not committed.
var ErrHandlerOverran = errors.New("consumer: handler returned after its lease could have ended; result not committed")

// settleTimeout bounds the store calls that settle a record, which run on
// a context the caller's cancellation does not reach, so that a drain can
// still record its work.
const settleTimeout = 10 * time.Second

// Guard runs one message through claim → handler → complete. The Consumer
// is built on it; use it directly to give an existing receive loop
// exactly-once processing:
//
//	o := guard.Process(ctx, msg)
//	switch o.Action() {
//	case consumer.Ack:        // delete / commit the message
//	case consumer.Retry:      // leave it, or make it visible after o.RetryAfter
//	case consumer.DeadLetter: // move it aside with o.Reason()
//	}
type Guard struct {
	cfg   config
	store dedup.Store
	// oneShot: the store runs in one-round-trip mode (ClaimComplete).
	oneShot bool
	handler Handler
	hooks   hooks
	tel     *telemetry
	// completed holds the records this Guard completed or found
	// completed lately, when the cache is on.
	completed *cache.Cache
	ownerID   string
	seq       atomic.Uint64
	beats     sync.Pool // of *heartbeat, stopped

	writes writeTypes // the business writes the Store commits
}

// NewGuard validates the options and returns a Guard. It reads the
// Store's Capabilities once and attaches the Store (dedup.Runtime): the
// logger given with WithLogger, and no throttle observer, since a Guard
// alone has no concurrency to adapt. A Store may serve several Guards.
func NewGuard(store dedup.Store, h Handler, opts ...GuardOption) (*Guard, error) {
	return newGuard(newConfig(opts), store, h, nil)
}

// newGuard builds a Guard and attaches the Store to it, with observe for
// the throttles the Store retries (nil: none is watched).
func newGuard(cfg config, store dedup.Store, h Handler, observe func(retry.Class, error)) (*Guard, error) {
	if store == nil || h == nil {
		return nil, configError("a Store and a Handler are required")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	caps, err := capabilities("Store", store.Capabilities)
	if err != nil {
		return nil, err
	}
	if caps.TenantKeyed && cfg.tenantFunc == nil {
		return nil, configError("the Store (%T) keys records by tenant: give WithTenantFunc, or every key shares its namespace's partition", store)
	}
	if cfg.oneRoundTrip && !caps.ClaimComplete {
		// Declared, not discovered: a wrapper that embeds the Store keeps
		// the mode.
		return nil, configError("OneRoundTrip: the Store (%T) does not declare ClaimComplete in its Capabilities", store)
	}
	if err := dedup.CheckNamespace(cfg.namespace); err != nil {
		return nil, fmt.Errorf("consumer: %w: %w", ErrInvalidConfig, err)
	}
	tel, err := newTelemetry(cfg.tracerProvider, cfg.meterProvider, cfg.propagator)
	if err != nil {
		return nil, fmt.Errorf("consumer: telemetry: %w", err)
	}
	hs, err := collectHooks(cfg.hooks)
	if err != nil {
		return nil, err
	}
	g := &Guard{cfg: cfg, store: safeStore{s: store, log: cfg.logger}, oneShot: cfg.oneRoundTrip, handler: h, hooks: hs, tel: tel}
	g.writes = writeTypes{store: fmt.Sprintf("%T", store), types: caps.Writes}
	if cfg.cacheEntries > 0 {
		g.completed = cache.New(cfg.cacheEntries, cfg.cacheBytes, cache.MaxAge(cfg.cacheMaxAge))
		if err := tel.observeCache(g.completed); err != nil {
			return nil, fmt.Errorf("consumer: telemetry: %w", err)
		}
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	g.ownerID = hex.EncodeToString(b[:]) + "-"
	if err := attach("Store", func() { g.store.Attach(dedup.Runtime{Logger: cfg.givenLogger(), Observe: observe}) }); err != nil {
		return nil, err
	}
	return g, nil
}

// Check runs the Store's check (its table exists with the right layout and
// can be read), bounded by CheckTimeout. An error wraps ErrMisconfigured.
// Consumer.Run calls it; call it before a receive loop that uses Process.
func (g *Guard) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.checkTimeout)
	defer cancel()
	if err := g.store.Check(ctx); err != nil {
		return fmt.Errorf("%w: store: %w", ErrMisconfigured, err)
	}
	return nil
}

// CacheStats reports the COMPLETED-record cache's counters, if it is on.
func (g *Guard) CacheStats() (cache.Stats, bool) {
	if g.completed == nil {
		return cache.Stats{}, false
	}
	return g.completed.Stats(), true
}

// Process runs m through the guard and returns its outcome; the caller
// carries out o.Action() on its source. The lease is renewed while the
// handler runs.
func (g *Guard) Process(ctx context.Context, m *Message) Outcome {
	return g.process(ctx, m, nil)
}

// run is what a Consumer's pool shares with the guard while it runs a
// message (nil for Guard.Process).
type run struct {
	// src takes a dead letter while the lease is still held, so that a
	// copy no destination takes can be kept in the store instead.
	src Source
	// stores bounds store calls with deadlines shared by the calls begun
	// within one second: a context and a timer per call would cost more
	// than the rest of the memory pipeline.
	stores *sharedDeadlines
	// leasedSince is when the leased handler began (Unix ns; 0: none
	// runs): the pool's heartbeat stops extending the delivery of a
	// handler that ran past its renewals.
	leasedSince atomic.Int64
}

// attempt is one message's way through the guard. ctx bounds the handler
// and ends when the caller stops; each store call gets its own context
// (storeCtx), which outlives ctx so that a drain can still record its work.
type attempt struct {
	g    *Guard
	m    *Message
	ctx  context.Context
	span trace.Span // the processing span, parent of the store calls'
	run  *run
	hash string
	// lease is the held claim (zero in one-round-trip mode, where the
	// record is written only once the handler has run).
	lease dedup.Lease
	// runs is the number of this handler run, for MaxAttempts and the
	// retry delay: the claim's attempt, or in one round trip, where no
	// record counts failed runs, the message's deliveries.
	runs int
	o    Outcome
}

// process is the message's flow through the guard, top to bottom: key →
// claim → handle → commit (one-round-trip mode: key → handle →
// claim-and-commit). The outcome is observed (span, metrics, hooks, log)
// before it is returned.
func (g *Guard) process(ctx context.Context, m *Message, r *run) Outcome {
	var start time.Time
	if len(g.hooks.outcome) > 0 {
		start = time.Now()
	}
	ctx, span := g.tel.startProcess(ctx, m)
	a := &attempt{g: g, m: m, ctx: ctx, span: span, run: r}
	o := a.do()
	g.tel.endProcess(ctx, span, m, o)
	if len(g.hooks.outcome) > 0 {
		took := time.Since(start)
		for _, h := range g.hooks.outcome {
			h.OnMessageOutcome(ctx, m, o, took)
		}
	}
	if o.Kind != Processed && o.Kind != Duplicate {
		g.cfg.logger.LogAttrs(ctx, logLevel(o.Kind), "message outcome",
			slogKind(o), slogKey(o.IdempotencyKey), slogID(m), slogErr(o.Err))
	}
	return o
}

func (a *attempt) do() Outcome {
	g := a.g
	// Key.
	key, hash, err := g.keys(a.m)
	if err != nil {
		return Outcome{Kind: DeadLettered, Err: err}
	}
	a.m.IdempotencyKey, a.hash = key, hash
	a.o = Outcome{IdempotencyKey: key}
	now := g.cfg.clock.Now()
	if g.completed != nil {
		// A duplicate of a key completed here lately makes no store call
		// (and in one-round-trip mode runs no handler).
		if r, ok := g.completed.Get(key, now); ok {
			return a.existing(now, r, false)
		}
	}
	if g.oneShot {
		// Handle, then claim and commit in one call.
		a.runs = a.m.Deliveries
		res, err := a.runHandler()
		if err != nil {
			return a.handlerFailed(err)
		}
		return a.commit(res)
	}
	// Claim.
	req := dedup.ClaimRequest{Key: key, PayloadHash: hash, Owner: g.nextOwner(),
		Now: now, LeaseUntil: now.Add(g.cfg.leaseTTL), SkewMargin: g.cfg.skewMargin}
	var c dedup.Claim
	err = a.storeCall(opClaim, func(ctx context.Context) (err error) {
		c, err = g.store.Claim(ctx, req)
		return err
	})
	if err != nil {
		return a.storeFailed("claim", err)
	}
	if !c.Acquired {
		g.remember(key, c.Existing, now)
		return a.existing(now, c.Existing, c.Archived)
	}
	a.expiredPresent(c.Previous)
	a.lease, a.runs, a.o.Attempt = c.Lease, c.Attempt, c.Attempt
	if c.Attempt > g.cfg.maxAttempts {
		// The record counts more failed runs than this worker allows (a
		// lower MaxAttempts than the worker that counted them).
		return a.deadLetter(fmt.Errorf("%w: %d attempts", ErrAttemptsExhausted, c.Attempt-1))
	}
	if c.Takeovers > g.cfg.maxTakeovers {
		// Decided before the handler runs: it would most likely end this
		// process too.
		return a.deadLetter(fmt.Errorf("%w: its lease was abandoned %d times, more than MaxTakeovers %d (the handler ended its process or ran past its lease)",
			ErrTakeoversExhausted, c.Takeovers, g.cfg.maxTakeovers))
	}
	if a.ctx.Err() != nil {
		return a.giveBack(Retrying, fmt.Errorf("consumer: stopped before the handler ran: %w", a.ctx.Err()))
	}
	// Handle.
	res, err := a.runHandler()
	if err != nil {
		return a.handlerFailed(err)
	}
	// Commit.
	return a.commit(res)
}

// storeCall runs one store call under its own context, span and metrics.
func (a *attempt) storeCall(op storeOp, call func(ctx context.Context) error) error {
	start := time.Now()
	ctx, cancel := a.storeCtx(start)
	defer cancel()
	ctx, span := a.g.tel.beginStore(ctx, op)
	err := call(ctx)
	a.g.tel.endStore(ctx, span, op, start, err)
	return err
}

// storeCtx is the context of one store call, made as it starts (now): it
// outlives the caller's cancellation (a drain can still record its work)
// and ends settleTimeout later.
func (a *attempt) storeCtx(now time.Time) (context.Context, context.CancelFunc) {
	var ctx context.Context
	cancel := func() {}
	if a.run != nil {
		ctx = a.run.stores.get(now)
	} else {
		ctx, cancel = context.WithTimeout(context.WithoutCancel(a.ctx), settleTimeout)
	}
	if a.span.IsRecording() {
		ctx = trace.ContextWithSpan(ctx, a.span)
	}
	return ctx, cancel
}

// runHandler calls the handler under HandlerTimeout, its lease (if any)
// renewed meanwhile, and refuses a result returned after renewals stopped.
func (a *attempt) runHandler() (Result, error) {
	g := a.g
	ctx, cancel := context.WithTimeout(a.ctx, g.cfg.handlerTimeout)
	defer cancel()
	start := time.Now()
	leased := a.lease.Owner != ""
	if leased {
		defer g.startHeartbeat(a, start, cancel).stop(&g.beats)
		if a.run != nil {
			a.run.leasedSince.Store(start.UnixNano())
			defer a.run.leasedSince.Store(0)
		}
	}
	res, took, err := g.callHandler(ctx, a.m, start)
	if err == nil && leased && took > g.cfg.renewFor() {
		return Result{}, ErrHandlerOverran
	}
	return res, err
}

// heartbeat renews a running handler's lease every LeaseTTL/3, until the
// handler returns or it has run for renewFor, and stops the handler if the
// lease is lost.
//
// A heartbeat and its timer are reused (Guard.beats): making a timer for
// every handler costs more than the rest of a message's path through the
// memory pipeline.
type heartbeat struct {
	mu     sync.Mutex
	a      attempt // a copy: the attempt stays on its goroutine's stack
	start  time.Time
	cancel context.CancelFunc
	timer  *time.Timer
	done   bool
}

// startHeartbeat starts renewing a's lease, for a handler begun at start.
func (g *Guard) startHeartbeat(a *attempt, start time.Time, cancel context.CancelFunc) *heartbeat {
	hb, _ := g.beats.Get().(*heartbeat)
	if hb == nil {
		hb = &heartbeat{}
		hb.timer = time.AfterFunc(time.Hour, hb.beat)
		hb.timer.Stop()
	}
	hb.mu.Lock()
	hb.a, hb.start, hb.cancel, hb.done = *a, start, cancel, false
	hb.timer.Reset(g.cfg.leaseTTL / 3)
	hb.mu.Unlock()
	return hb
}

// stop ends the renewals; the heartbeat goes back to pool unless a beat
// may still be running.
func (h *heartbeat) stop(pool *sync.Pool) {
	h.mu.Lock()
	h.done = true
	idle := h.timer.Stop() // false: a beat has begun, and may still run
	if idle {
		h.a, h.cancel = attempt{}, nil
	}
	h.mu.Unlock()
	if idle {
		pool.Put(h)
	}
}

func (h *heartbeat) beat() {
	h.mu.Lock()
	g := h.a.g
	if h.done || time.Since(h.start) > g.cfg.renewFor() { // done: g may be gone
		// Done, or a handler that ignores its context: its lease is left
		// to run out so that another worker can take over.
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	now := g.cfg.clock.Now()
	err := h.a.storeCall(opExtend, func(ctx context.Context) error {
		return g.store.Extend(ctx, dedup.ExtendRequest{Lease: h.a.lease, Now: now, LeaseUntil: now.Add(g.cfg.leaseTTL)})
	})
	g.reportHeartbeat(h.a.ctx, h.a.m, true, err)
	if errors.Is(err, dedup.ErrLeaseLost) {
		h.cancel() // another worker owns the key now: stop this handler's work
		return
	}
	h.mu.Lock()
	if !h.done {
		h.timer.Reset(g.cfg.leaseTTL / 3)
	}
	h.mu.Unlock()
}

// callHandler runs the handler, begun at start, turning a panic into an
// error, and says how long it took.
func (g *Guard) callHandler(ctx context.Context, m *Message, start time.Time) (res Result, took time.Duration, err error) {
	ctx, span := g.tel.startHandler(ctx)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrHandlerPanic, p)
			g.cfg.logger.ErrorContext(ctx, "handler panic", "panic", fmt.Sprint(p), "stack", string(debug.Stack()), slogID(m))
		}
		took = time.Since(start)
		endChild(span, err)
		g.tel.handled(ctx, took, err)
		for _, h := range g.hooks.handler {
			h.OnMessageHandled(ctx, m, took, err)
		}
	}()
	res, err = g.handler.Handle(ctx, m)
	return res, took, err
}

// handlerFailed decides what a handler error means for the message.
func (a *attempt) handlerFailed(herr error) Outcome {
	g := a.g
	a.o.Err = herr
	switch {
	case errors.Is(herr, ErrHandlerOverran):
		o := a.recordFailure(herr, g.retryDelay(a.runs), false, false)
		if o.Kind == Retrying {
			o.Kind = LeaseLost // its result is refused, like a fenced worker's
		}
		return o
	case a.ctx.Err() != nil:
		// Stopped by shutdown: not the message's fault.
		return a.giveBack(Retrying, herr)
	case errors.Is(herr, ErrPermanent):
		return a.deadLetter(herr)
	case a.runs >= g.cfg.maxAttempts:
		return a.deadLetter(fmt.Errorf("%w after %d: %w", ErrAttemptsExhausted, a.runs, herr))
	}
	return a.recordFailure(herr, g.retryDelay(a.runs), false, false)
}

// commit writes the handler's result (Complete under the lease, or
// ClaimComplete in one round trip), and when a business write's own
// condition refuses it, writes the refusal instead: the message is then
// Rejected, for good.
func (a *attempt) commit(res Result) Outcome {
	kind, resp, writes := Processed, res.Response, res.Writes
	if res.Rejected {
		kind, writes = Rejected, nil
	}
	now := a.g.cfg.clock.Now()
	c, err := a.writeHeld(resp, writes, now)
	be := businessError(err)
	if be != nil {
		kind, resp = Rejected, res.RejectResponse
		c, err = a.writeHeld(resp, nil, now)
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

// write commits a result once: resp cached, writes applied, at now.
func (a *attempt) write(resp []byte, writes []any, now time.Time) (c dedup.Claim, err error) {
	g := a.g
	if err := g.writes.check(writes); err != nil {
		return dedup.Claim{}, err
	}
	if g.oneShot {
		req := dedup.ClaimCompleteRequest{Key: a.o.IdempotencyKey, PayloadHash: a.hash, Owner: g.nextOwner(), Response: resp,
			Now: now, ExpiresAt: now.Add(g.cfg.retention), Writes: writes, SkewMargin: g.cfg.skewMargin}
		err = a.storeCall(opClaimComplete, func(ctx context.Context) (err error) {
			c, err = g.store.ClaimComplete(ctx, req)
			return err
		})
		return c, err
	}
	op := opComplete
	if len(writes) > 0 {
		op = opTransaction
	}
	req := dedup.CompleteRequest{Lease: a.lease, Response: resp, Now: now, ExpiresAt: now.Add(g.cfg.retention), Writes: writes}
	err = a.storeCall(op, func(ctx context.Context) error { return g.store.Complete(ctx, req) })
	return dedup.Claim{Acquired: true}, err
}

// writeHeld writes and, while the store is out, the lease still holds and
// the handler's context has not ended, writes again: a handler that
// succeeded need not run again for an outage shorter than its lease.
// (Without a lease, in one round trip, the message is simply given back.)
// The waits watch the context, so that a drain ends on time; the store
// calls themselves are bounded by their own deadlines.
func (a *attempt) writeHeld(resp []byte, writes []any, now time.Time) (dedup.Claim, error) {
	g := a.g
	c, err := a.write(resp, writes, now)
	if g.oneShot || err == nil {
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
		c, err = a.write(resp, writes, g.cfg.clock.Now())
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
		errors.Is(err, dedup.ErrUnsupportedWrite), errors.Is(err, dedup.ErrEmptyKey),
		errors.Is(err, dedup.ErrResponseTooLarge), errors.Is(err, dedup.ErrNilWrite):
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
// the lease is held (a Guard's caller sends it later, from the outcome).
// When no destination takes the copy, req becomes the DEAD_LETTER record
// that keeps it, with the reason and what the send said, until Retention
// ends: the handler never runs again for it, and the message can be
// released.
func (a *attempt) sendDeadLetter(o Outcome, req *dedup.FailRequest) (deadLetterFate, error) {
	if a.run == nil {
		return deadLetterUnsent, nil
	}
	ctx, cancel := a.storeCtx(time.Now())
	defer cancel()
	err := a.run.src.DeadLetter(ctx, a.m, o.Reason())
	if err == nil {
		return deadLetterSent, nil
	}
	g := a.g
	g.cfg.logger.ErrorContext(a.ctx, "dead letter not sent; kept in the store as DEAD_LETTER (onceq inspect shows it)",
		slogID(a.m), slogKey(o.IdempotencyKey), slogErr(err))
	req.DeadLetter, req.ResetAttempts, req.RetryAt = true, true, req.Now.Add(g.cfg.retention)
	req.Reason = dedup.StorableReason(fmt.Sprintf("dead letter of message %s not sent (%v): %s", a.m.ID, err, req.Reason))
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
		now := g.cfg.clock.Now()
		req := dedup.FailRequest{Lease: a.lease, Reason: dedup.StorableReason(cause.Error()), Now: now,
			RetryAt: now.Add(delay), ResetAttempts: final, RefundAttempt: refund}
		if final {
			o.Kind = DeadLettered
			o.deadLetter, o.deadLetterErr = a.sendDeadLetter(o, &req)
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
			if err != nil && faultOf(err) == messageFault && !final && !refund {
				// Still refused: the store cannot count this message's
				// failed runs, so it is dead-lettered now rather than
				// taken over and run again, uncounted, for ever. (A
				// refunded failure counts nothing anyway: the message
				// keeps the fate it was given.)
				final = true
				o.Err = fmt.Errorf("consumer: the store refused to record a failed run, so its attempts cannot be counted (%w); the run failed: %w", err, cause)
			}
		}
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
		if err != nil && faultOf(err) == configFault && o.deadLetter == deadLetterUnsent && !final {
			// The deployment's fault, not the message's: given back, and a
			// Consumer stops.
			o.Kind, o.RetryAfter = Misconfigured, g.cfg.failedRetryDelay
			o.Err = fmt.Errorf("%w: consumer: fail: %w (the run failed: %v)", ErrMisconfigured, err, cause)
			return o
		}
		// A Fail that did not land for an outage is no reason to keep the
		// message from its fate: the lease then simply expires.
	}
	if final {
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

// businessError is err's *dedup.BusinessConditionError, if any.
func businessError(err error) *dedup.BusinessConditionError {
	if err == nil {
		return nil // the errors.As target escapes: made only when needed
	}
	var be *dedup.BusinessConditionError
	if errors.As(err, &be) {
		return be
	}
	return nil
}

// keys returns the stored key and payload hash of m, the key behind m's
// tenant when there is a tenant function.
func (g *Guard) keys(m *Message) (string, string, error) {
	key, hash, err := g.untenanted(m)
	if err != nil || g.cfg.tenantFunc == nil {
		return key, hash, err
	}
	tenant, err := g.cfg.tenantFunc(m)
	if err != nil {
		return "", "", fmt.Errorf("consumer: tenant function: %w", err)
	}
	key, err = dedup.TenantKey(tenant, key)
	return key, hash, err
}

// untenanted returns m's key without its tenant, and its payload hash.
func (g *Guard) untenanted(m *Message) (string, string, error) {
	raw, ok := "", false
	if g.cfg.keyFunc != nil {
		k, err := g.cfg.keyFunc(m)
		if err != nil {
			return "", "", fmt.Errorf("consumer: key function: %w", err)
		}
		if g.cfg.keyCoversBody != nil && g.cfg.keyCoversBody(m) {
			key, err := dedup.DerivedKey(g.cfg.namespace, k)
			return key, "", err // the key already hashes the body
		}
		raw, ok = k, true
	} else if k, found := m.Attributes[IdempotencyKeyAttribute]; found {
		raw, ok = k, true
	}
	if !ok {
		// The key is the body's hash: hash once.
		return dedup.BodyKey(g.cfg.namespace, m.Body)
	}
	key, err := dedup.Key(g.cfg.namespace, raw)
	if err != nil {
		return "", "", err
	}
	hash, err := g.cfg.payloadHash(m.Body)
	if err != nil {
		return "", "", fmt.Errorf("consumer: payload hash: %w", err)
	}
	return key, hash, nil
}

// remember caches r, a record of key known at now, when the cache is on
// (only a COMPLETED record is kept), so that a duplicate of key is
// answered with no store call.
func (g *Guard) remember(key string, r dedup.Record, now time.Time) {
	if g.completed != nil {
		g.completed.Put(key, r, now)
	}
}

// nextOwner is a new owner token: the Guard's random ID and a sequence.
func (g *Guard) nextOwner() string {
	b := make([]byte, 0, 32)
	b = strconv.AppendUint(append(b, g.ownerID...), g.seq.Add(1), 36)
	return string(b)
}

func (g *Guard) retryDelay(attempt int) time.Duration {
	d := g.cfg.failedRetryDelay
	for i := 1; i < attempt && d < g.cfg.maxRetryDelay; i++ {
		d *= 2
	}
	return min(d, g.cfg.maxRetryDelay)
}

func (g *Guard) reportHeartbeat(ctx context.Context, m *Message, lease bool, err error) {
	g.tel.heartbeat(ctx, lease, err)
	for _, h := range g.hooks.heartbeat {
		h.OnMessageHeartbeat(ctx, m, lease, err)
	}
}

// The reasons a Fail carries when the store refused the one it was given.
const (
	plainReason           = "the run failed; the store refused the text of its error (see the worker's log)"
	plainDeadLetterReason = "dead letter not sent and kept here; the store refused the text of its reason (see the worker's log)"
)
