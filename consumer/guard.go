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
	cfg   config
	store dedup.Store
	// oneShot is the store in one-round-trip mode, nil otherwise.
	oneShot dedup.Store
	handler Handler
	hooks   hooks
	tel     *telemetry
	// completed looks keys up in the COMPLETED cache, when it is on.
	completed *cache.Store
	// wallClock: the records' clock is the wall clock, so a reading taken
	// for timing serves the records too.
	wallClock bool
	ownerID   string
	seq       atomic.Uint64
}

// NewGuard validates the options and returns a Guard.
func NewGuard(store dedup.Store, h Handler, opts ...GuardOption) (*Guard, error) {
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
	caps := store.Capabilities()
	if caps.TenantKeyed && cfg.tenantFunc == nil {
		return nil, configError("the Store (%T) keys records by tenant: give WithTenantFunc, or every key shares its namespace's partition", store)
	}
	tel, err := newTelemetry(cfg.tracerProvider, cfg.meterProvider, cfg.propagator)
	if err != nil {
		return nil, fmt.Errorf("consumer: telemetry: %w", err)
	}
	cfg.handLogger(store)
	var completed *cache.Store
	if cfg.cacheEntries > 0 {
		completed = cache.Wrap(store, cfg.cacheEntries, cfg.cacheBytes, cache.MaxAge(cfg.cacheMaxAge))
		if err := tel.observeCache(completed); err != nil {
			return nil, fmt.Errorf("consumer: telemetry: %w", err)
		}
		store = completed
	}
	hs, err := collectHooks(cfg.hooks)
	if err != nil {
		return nil, err
	}
	if err := dedup.CheckNamespace(cfg.namespace); err != nil {
		return nil, fmt.Errorf("consumer: %w: %w", ErrInvalidConfig, err)
	}
	g := &Guard{cfg: cfg, store: store, handler: h, hooks: hs, tel: tel, completed: completed}
	_, g.wallClock = cfg.clock.(wallClock)
	if cfg.oneRoundTrip {
		// Declared, not discovered: a wrapper that embeds the Store keeps
		// the mode.
		if !caps.ClaimComplete {
			return nil, configError("OneRoundTrip: the Store (%T) does not declare ClaimComplete in its Capabilities", store)
		}
		g.oneShot = store
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
	if g.completed == nil {
		return cache.Stats{}, false
	}
	return g.completed.Stats(), true
}

// leaseTracker is told when the handler holds a lease, so heartbeats can
// renew it and cancel the handler if it is lost.
type leaseTracker interface {
	// handlerContext is ctx bounded by timeout from now, for the handler;
	// handlerDone cancels it once the handler has returned. The tracker
	// cancels it too if the lease is lost.
	handlerContext(ctx context.Context, timeout time.Duration, now time.Time) context.Context
	handlerDone()
	// storeContext is a context for one store call, made when the call
	// starts (now): it outlives the caller's cancellation (a drain can
	// still record its work) and ends settleTimeout later.
	storeContext(now time.Time) (context.Context, context.CancelFunc)
	// leased tells the tracker of the lease the handler holds from now.
	leased(l dedup.Lease, now time.Time)
	unleased()
	// deadLetter sends the message to the dead-letter destination while
	// its lease is still held, so that a copy no destination takes can be
	// kept in the store instead (DEAD_LETTER). errDeadLetterLater: the
	// caller of Process does it, from the outcome.
	deadLetter(ctx context.Context, reason string) error
}

// errDeadLetterLater is a tracker's answer when the dead letter is sent
// by whoever acts on the outcome (a Guard's caller).
var errDeadLetterLater = errors.New("consumer: dead letter sent from the outcome")

// Process runs m through the guard and returns its outcome; the caller
// carries out o.Action() on its source. The lease is renewed while the
// handler runs.
func (g *Guard) Process(ctx context.Context, m *Message) Outcome {
	// No tracker: attempt makes a heartbeat of its own once it needs one,
	// so that a duplicate answered by the cache allocates nothing.
	o, _ := g.process(ctx, m, nil)
	return o
}

// process runs m and reports its outcome, and the time of its last clock
// reading; ctx bounds the handler, tr gives the store calls their contexts
// (nil: a heartbeat of its own).
func (g *Guard) process(ctx context.Context, m *Message, tr leaseTracker) (Outcome, time.Time) {
	start := time.Now()
	ctx, span := g.tel.startProcess(ctx, m)
	o, end := g.attempt(ctx, span, m, tr, start)
	g.tel.endProcess(ctx, span, m, o)
	if len(g.hooks.outcome) > 0 {
		end = time.Now()
		for _, h := range g.hooks.outcome {
			h.OnMessageOutcome(ctx, m, o, end.Sub(start))
		}
	}
	if o.Kind != Processed && o.Kind != Duplicate {
		g.cfg.logger.LogAttrs(ctx, logLevel(o.Kind), "message outcome",
			slogKind(o), slogKey(o.IdempotencyKey), slogID(m), slogErr(o.Err))
	}
	return o, end
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
		// The key is the body's hash: hash once, allocate once.
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

// nextOwner is a new owner token: the Guard's random ID and a sequence.
func (g *Guard) nextOwner() string {
	var buf [64]byte
	b := append(buf[:0], g.ownerID...)
	return string(strconv.AppendUint(b, g.seq.Add(1), 36))
}

// recordTime is the time written into records, given a clock reading
// now: now itself on the wall clock, else the configured Clock's.
func (g *Guard) recordTime(now time.Time) time.Time {
	if g.wallClock {
		return now
	}
	return g.cfg.clock.Now()
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

// callHandler runs the handler, begun at start, turning a panic into an
// error; end is when it returned.
func (g *Guard) callHandler(ctx context.Context, m *Message, start time.Time) (res Result, end time.Time, err error) {
	ctx, span := g.tel.startHandler(ctx)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrHandlerPanic, p)
			g.cfg.logger.ErrorContext(ctx, "handler panic", "panic", fmt.Sprint(p), "stack", string(debug.Stack()), slogID(m))
		}
		end = time.Now()
		took := end.Sub(start)
		endChild(span, err)
		g.tel.handled(ctx, took, err)
		for _, h := range g.hooks.handler {
			h.OnMessageHandled(ctx, m, took, err)
		}
	}()
	res, err = g.handler.Handle(ctx, m)
	return res, end, err
}

// extendLease renews l for another LeaseTTL.
func (g *Guard) extendLease(ctx context.Context, l dedup.Lease) error {
	sctx, cancel := settleContext(ctx)
	defer cancel()
	began := time.Now()
	now := g.recordTime(began)
	sctx, span := g.tel.beginStore(sctx, opExtend)
	err := g.store.Extend(sctx, dedup.ExtendRequest{Lease: l, Now: now, LeaseUntil: now.Add(g.cfg.leaseTTL)})
	g.tel.endStore(sctx, span, opExtend, began, err)
	return err
}

// selfHeartbeat renews a lease on a timer, for Guard.Process callers that
// have no Consumer running a shared heartbeat.
type selfHeartbeat struct {
	g      *Guard
	parent context.Context // Process's ctx without its cancellation
	start  time.Time
	mu     sync.Mutex
	timer  *time.Timer
	lease  dedup.Lease
	cancel context.CancelFunc
	done   bool
}

func (h *selfHeartbeat) handlerContext(ctx context.Context, timeout time.Duration, _ time.Time) context.Context {
	hctx, cancel := context.WithTimeout(ctx, timeout)
	h.mu.Lock()
	h.cancel = cancel
	h.mu.Unlock()
	return hctx
}

func (h *selfHeartbeat) handlerDone() {
	h.mu.Lock()
	cancel := h.cancel
	h.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (h *selfHeartbeat) storeContext(time.Time) (context.Context, context.CancelFunc) {
	return context.WithTimeout(h.parent, settleTimeout)
}

func (h *selfHeartbeat) leased(l dedup.Lease, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lease, h.start = l, now
	h.timer = time.AfterFunc(h.g.cfg.leaseTTL/3, h.beat)
}

func (h *selfHeartbeat) beat() {
	h.mu.Lock()
	if h.done || time.Since(h.start) > h.g.cfg.renewFor() {
		// Done, or a handler that ignores its context: its lease is left
		// to run out so that another worker can take over.
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

func (h *selfHeartbeat) deadLetter(context.Context, string) error { return errDeadLetterLater }

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
