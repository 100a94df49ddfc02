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
	cfg     config
	store   dedup.Store
	oneShot dedup.ClaimCompleter
	handler Handler
	hooks   hooks
	tel     *telemetry
	ownerID string
	seq     atomic.Uint64
}

// NewGuard validates the options and returns a Guard.
func NewGuard(store dedup.Store, h Handler, opts ...Option) (*Guard, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.maxInFlight == 0 {
		cfg.maxInFlight = 2 * cfg.concurrency
	}
	return newGuard(cfg, store, h)
}

func newGuard(cfg config, store dedup.Store, h Handler) (*Guard, error) {
	if store == nil || h == nil {
		return nil, configError("a Store and a Handler are required")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tel, err := newTelemetry(cfg.tracerProvider, cfg.meterProvider, cfg.propagator)
	if err != nil {
		return nil, fmt.Errorf("consumer: telemetry: %w", err)
	}
	if cfg.cacheEntries > 0 {
		c := cache.Wrap(store, cfg.cacheEntries, cfg.cacheBytes)
		if err := tel.observeCache(c); err != nil {
			return nil, fmt.Errorf("consumer: telemetry: %w", err)
		}
		store = c
	}
	hs, err := collectHooks(cfg.hooks)
	if err != nil {
		return nil, err
	}
	g := &Guard{cfg: cfg, store: store, handler: h, hooks: hs, tel: tel}
	if cfg.oneRoundTrip {
		cc, ok := store.(dedup.ClaimCompleter)
		if !ok {
			return nil, configError("OneRoundTrip: the Store (%T) cannot claim and complete in one call", store)
		}
		g.oneShot = cc
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	g.ownerID = hex.EncodeToString(b[:]) + "-"
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
	c, ok := g.store.(cache.Cache)
	if !ok {
		return cache.Stats{}, false
	}
	return c.Stats(), true
}

// leaseTracker is told when the handler holds a lease, so heartbeats can
// renew it and cancel the handler if it is lost.
type leaseTracker interface {
	// handlerContext is ctx bounded by timeout, for the handler.
	handlerContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc)
	leased(l dedup.Lease, cancel context.CancelFunc)
	unleased()
}

// Process runs m through the guard and returns its outcome; the caller
// carries out o.Action() on its source. The lease is renewed while the
// handler runs.
func (g *Guard) Process(ctx context.Context, m *Message) Outcome {
	hb := &selfHeartbeat{g: g}
	defer hb.unleased()
	sctx, cancel := settleContext(ctx)
	defer cancel()
	return g.process(ctx, sctx, m, hb)
}

// process runs m; ctx bounds the handler, sctx the store calls that settle
// the record (it outlives a cancelled ctx, so a drain can record its work).
func (g *Guard) process(ctx, sctx context.Context, m *Message, tr leaseTracker) Outcome {
	start := time.Now()
	ctx, span := g.tel.startProcess(ctx, m)
	if span.IsRecording() {
		sctx = trace.ContextWithSpan(sctx, span)
	}
	o := g.run(ctx, sctx, m, tr)
	g.tel.endProcess(ctx, span, m, o)
	for _, h := range g.hooks.outcome {
		h.OnOutcome(ctx, m, o, time.Since(start))
	}
	if o.Kind != Processed && o.Kind != Duplicate {
		g.cfg.logger.LogAttrs(ctx, logLevel(o.Kind), "message outcome",
			slogKind(o), slogKey(o.Key), slogID(m), slogErr(o.Err))
	}
	return o
}

// keys returns the stored key and payload hash of m.
func (g *Guard) keys(m *Message) (string, string, error) {
	raw, ok := "", false
	if g.cfg.keyFunc != nil {
		k, err := g.cfg.keyFunc(m)
		if err != nil {
			return "", "", fmt.Errorf("consumer: key function: %w", err)
		}
		if g.cfg.keyCoversBody != nil && g.cfg.keyCoversBody(m) {
			key, err := dedup.Key(g.cfg.namespace, k)
			return key, "", err // the key already hashes the body
		}
		raw, ok = k, true
	} else if k, found := m.Attributes[IdempotencyKeyAttribute]; found {
		raw, ok = k, true
	}
	if !ok {
		// The key is the body's hash: hash once, allocate once.
		return dedup.BodyKey(g.cfg.namespace, m.Body)
	}
	key, err := dedup.Key(g.cfg.namespace, raw)
	return key, dedup.PayloadHash(m.Body), err
}

func (g *Guard) nextOwner() string {
	// Built in one buffer: concatenating a formatted number costs two
	// allocations per claim.
	var buf [32]byte
	b := append(buf[:0], g.ownerID...)
	return string(strconv.AppendUint(b, g.seq.Add(1), 36))
}

func (g *Guard) retryDelay(attempt int) time.Duration {
	d := g.cfg.failedRetryDelay
	for i := 1; i < attempt && d < g.cfg.maxRetryDelay; i++ {
		d *= 2
	}
	return min(d, g.cfg.maxRetryDelay)
}

func settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
}

func (g *Guard) run(ctx, sctx context.Context, m *Message, tr leaseTracker) Outcome {
	key, hash, err := g.keys(m)
	if err != nil {
		return Outcome{Kind: DeadLettered, Err: err}
	}
	m.IdempotencyKey = key
	if g.oneShot != nil {
		return g.runOneShot(ctx, sctx, m, key, hash, tr)
	}
	now := g.cfg.clock.Now()
	cctx, span, began := g.tel.beginStore(ctx, "claim")
	c, err := g.store.Claim(cctx, dedup.ClaimRequest{Key: key, PayloadHash: hash, Owner: g.nextOwner(),
		Now: now, LeaseUntil: now.Add(g.cfg.leaseTTL)})
	g.tel.endStore(cctx, span, "claim", began, err)
	if err != nil {
		// A store that refuses claims is an outage or a misconfiguration,
		// never the message's fault: keep the message.
		return Outcome{Kind: Retrying, Key: key, Err: fmt.Errorf("consumer: claim: %w", err), RetryAfter: g.cfg.failedRetryDelay}
	}
	if !c.Acquired {
		return g.existing(key, hash, now, c.Existing)
	}
	if c.Previous != nil {
		g.tel.expired.Add(ctx, 1, metric.WithAttributes(attrPreviousStatus.String(string(c.Previous.Status))))
		for _, h := range g.hooks.expired {
			h.OnExpiredPresent(ctx, m, string(c.Previous.Status))
		}
	}
	o := Outcome{Key: key, Attempt: c.Attempt}
	if c.Attempt > g.cfg.maxAttempts {
		// Earlier attempts died with their worker (crash, OOM, kill):
		// the record counted them, the source may not have.
		return g.fail(ctx, sctx, c.Lease, o, fmt.Errorf("%w: %d attempts", ErrAttemptsExhausted, c.Attempt-1), true)
	}
	if ctx.Err() != nil {
		return g.fail(ctx, sctx, c.Lease, o, fmt.Errorf("consumer: stopped before the handler ran: %w", ctx.Err()), false)
	}

	hctx, cancel := tr.handlerContext(ctx, g.cfg.handlerTimeout)
	tr.leased(c.Lease, cancel)
	res, herr := g.callHandler(hctx, m)
	tr.unleased()
	cancel()

	if herr != nil {
		o.Err = herr
		switch {
		case ctx.Err() != nil:
			return g.fail(ctx, sctx, c.Lease, o, herr, false)
		case errors.Is(herr, ErrPermanent):
			return g.fail(ctx, sctx, c.Lease, o, herr, true)
		case c.Attempt >= g.cfg.maxAttempts:
			return g.fail(ctx, sctx, c.Lease, o, fmt.Errorf("%w after %d: %w", ErrAttemptsExhausted, c.Attempt, herr), true)
		}
		return g.fail(ctx, sctx, c.Lease, o, herr, false)
	}
	return g.complete(ctx, sctx, c.Lease, o, res)
}

// existing decides what a live record held by someone else means.
func (g *Guard) existing(key, hash string, now time.Time, r dedup.Record) Outcome {
	o := Outcome{Key: key, Attempt: r.Attempts}
	// No hash: the key covers the body, so the same key is the same payload.
	if hash != "" && r.PayloadHash != "" && r.PayloadHash != hash {
		o.Kind, o.Err = KeyReuse, &dedup.KeyReuseError{Key: key, Existing: r}
		return o
	}
	switch r.Status {
	case dedup.StatusCompleted:
		o.Kind, o.Response = Duplicate, r.Response
	case dedup.StatusFailed:
		o.Kind, o.Err = Retrying, fmt.Errorf("consumer: previous attempt failed: %s", r.LastError)
		o.RetryAfter = max(r.ExpiresAt.Sub(now)+time.Second, time.Second)
	default:
		o.Kind, o.Err = InFlightElsewhere, fmt.Errorf("consumer: key held by another worker until %v", r.ExpiresAt)
		o.RetryAfter = max(min(g.cfg.pendingRecheck, r.ExpiresAt.Sub(now)+time.Second), 100*time.Millisecond)
	}
	return o
}

// fail records a failed attempt and says what to do with the message.
// dead marks a final failure: the message is dead-lettered and the
// attempt count reset, so a redrive from the DLQ starts afresh.
func (g *Guard) fail(ctx, sctx context.Context, l dedup.Lease, o Outcome, cause error, dead bool) Outcome {
	now := g.cfg.clock.Now()
	delay := g.retryDelay(o.Attempt)
	if dead || ctx.Err() != nil {
		delay = 0 // re-claimable at once: by a redrive, or after shutdown
	}
	fctx, span, began := g.tel.beginStore(sctx, "fail")
	err := g.store.Fail(fctx, dedup.FailRequest{Lease: l, Reason: truncate(cause.Error(), 1024), Now: now,
		RetryAt: now.Add(delay), ResetAttempts: dead})
	g.tel.endStore(fctx, span, "fail", began, err)
	o.Err = cause
	switch {
	case errors.Is(err, dedup.ErrLeaseLost):
		o.Kind, o.Err, o.RetryAfter = LeaseLost, fmt.Errorf("%w (while failing: %v)", err, cause), g.cfg.pendingRecheck
	case dead:
		// Dead-lettered even when the Fail did not land: the record's
		// lease then simply expires.
		o.Kind = DeadLettered
	default:
		o.Kind, o.RetryAfter = Retrying, max(delay, 0)
	}
	return o
}

// complete commits the handler's result with the COMPLETED transition.
func (g *Guard) complete(ctx, sctx context.Context, l dedup.Lease, o Outcome, res Result) Outcome {
	kind, resp, writes := Processed, res.Response, res.Writes
	if res.Rejected {
		kind, writes = Rejected, nil
	}
	now := g.cfg.clock.Now()
	req := dedup.CompleteRequest{Lease: l, Response: resp, Now: now, ExpiresAt: now.Add(g.cfg.retention), Writes: writes}
	err := g.storeComplete(sctx, req)
	be := businessError(err)
	if be != nil {
		kind, resp = Rejected, res.RejectResponse
		req.Response, req.Writes = resp, nil
		err = g.storeComplete(sctx, req)
	}
	switch {
	case err == nil:
		o.Kind, o.Response = kind, resp
		if be != nil {
			o.Err = be
		}
		return o
	case errors.Is(err, dedup.ErrLeaseLost):
		o.Kind, o.Err, o.RetryAfter = LeaseLost, err, g.cfg.pendingRecheck
		return o
	case permanentStoreError(err):
		return g.fail(ctx, sctx, l, o, fmt.Errorf("consumer: complete: %w", err), true)
	}
	// Unknown whether anything committed? A transaction either committed
	// or not; a retry finds COMPLETED or re-claims. Free the key at once.
	o = g.fail(ctx, sctx, l, o, fmt.Errorf("consumer: complete: %w", err), false)
	if o.Kind == Retrying {
		o.RetryAfter = g.cfg.failedRetryDelay
	}
	return o
}

func (g *Guard) storeComplete(ctx context.Context, req dedup.CompleteRequest) error {
	op := "complete"
	if len(req.Writes) > 0 {
		op = "transaction"
	}
	ctx, span, began := g.tel.beginStore(ctx, op)
	err := g.store.Complete(ctx, req)
	g.tel.endStore(ctx, span, op, began, err)
	return err
}

func (g *Guard) storeClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	ctx, span, began := g.tel.beginStore(ctx, "claim_complete")
	c, err := g.oneShot.ClaimComplete(ctx, req)
	g.tel.endStore(ctx, span, "claim_complete", began, err)
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

func permanentStoreError(err error) bool {
	return errors.Is(err, dedup.ErrRecordTooLarge) || errors.Is(err, dedup.ErrTooManyWrites) ||
		errors.Is(err, dedup.ErrUnsupportedWrite) || retry.Classify(err) == retry.Permanent
}

func (g *Guard) runOneShot(ctx, sctx context.Context, m *Message, key, hash string, tr leaseTracker) Outcome {
	o := Outcome{Key: key, Attempt: m.Attempt}
	hctx, cancel := tr.handlerContext(ctx, g.cfg.handlerTimeout)
	res, herr := g.callHandler(hctx, m)
	cancel()
	if herr != nil {
		o.Err = herr
		switch {
		case errors.Is(herr, ErrPermanent):
			o.Kind = DeadLettered
		case m.Attempt >= g.cfg.maxAttempts:
			o.Kind, o.Err = DeadLettered, fmt.Errorf("%w after %d: %w", ErrAttemptsExhausted, m.Attempt, herr)
		default:
			o.Kind, o.RetryAfter = Retrying, g.retryDelay(m.Attempt)
		}
		return o
	}
	kind, resp, writes := Processed, res.Response, res.Writes
	if res.Rejected {
		kind, writes = Rejected, nil
	}
	now := g.cfg.clock.Now()
	req := dedup.ClaimCompleteRequest{Key: key, PayloadHash: hash, Owner: g.nextOwner(), Response: resp,
		Now: now, ExpiresAt: now.Add(g.cfg.retention), Writes: writes}
	c, err := g.storeClaimComplete(sctx, req)
	if be := businessError(err); be != nil {
		kind, resp = Rejected, res.RejectResponse
		req.Response, req.Writes = resp, nil
		c, err = g.storeClaimComplete(sctx, req)
	}
	switch {
	case err == nil && !c.Acquired:
		return g.existing(key, hash, now, c.Existing)
	case err == nil:
		o.Kind, o.Response, o.Attempt = kind, resp, c.Attempt
		return o
	case permanentStoreError(err):
		o.Kind, o.Err = DeadLettered, fmt.Errorf("consumer: claim-complete: %w", err)
	default:
		o.Kind, o.Err, o.RetryAfter = Retrying, fmt.Errorf("consumer: claim-complete: %w", err), g.cfg.failedRetryDelay
	}
	return o
}

// callHandler runs the handler, turning a panic into an error.
func (g *Guard) callHandler(ctx context.Context, m *Message) (res Result, err error) {
	start := time.Now()
	ctx, span := g.tel.startHandler(ctx)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrHandlerPanic, p)
			g.cfg.logger.ErrorContext(ctx, "handler panic", "panic", fmt.Sprint(p), "stack", string(debug.Stack()), slogID(m))
		}
		took := time.Since(start)
		endChild(span, err)
		g.tel.handled(ctx, took, err)
		for _, h := range g.hooks.handler {
			h.OnHandled(ctx, m, took, err)
		}
	}()
	return g.handler.Handle(ctx, m)
}

// extendLease renews l for another LeaseTTL.
func (g *Guard) extendLease(ctx context.Context, l dedup.Lease) error {
	sctx, cancel := settleContext(ctx)
	defer cancel()
	now := g.cfg.clock.Now()
	sctx, span, began := g.tel.beginStore(sctx, "extend")
	err := g.store.Extend(sctx, dedup.ExtendRequest{Lease: l, Now: now, LeaseUntil: now.Add(g.cfg.leaseTTL)})
	g.tel.endStore(sctx, span, "extend", began, err)
	return err
}

// selfHeartbeat renews a lease on a timer, for Guard.Process callers that
// have no Consumer running a shared heartbeat.
type selfHeartbeat struct {
	g      *Guard
	mu     sync.Mutex
	timer  *time.Timer
	lease  dedup.Lease
	cancel context.CancelFunc
	done   bool
}

func (h *selfHeartbeat) handlerContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, timeout)
}

func (h *selfHeartbeat) leased(l dedup.Lease, cancel context.CancelFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lease, h.cancel = l, cancel
	h.timer = time.AfterFunc(h.g.cfg.leaseTTL/3, h.beat)
}

func (h *selfHeartbeat) beat() {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return
	}
	l, cancel := h.lease, h.cancel
	h.mu.Unlock()
	err := h.g.extendLease(context.Background(), l)
	if errors.Is(err, dedup.ErrLeaseLost) {
		cancel() // another worker owns the key now: stop this handler's work
		return
	}
	h.mu.Lock()
	if !h.done {
		h.timer.Reset(h.g.cfg.leaseTTL / 3)
	}
	h.mu.Unlock()
}

func (h *selfHeartbeat) unleased() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = true
	if h.timer != nil {
		h.timer.Stop()
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
