package consumer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/cache"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/retry"
	"go.opentelemetry.io/otel/trace"
)

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
	// obs is where the Guard's telemetry and hooks go; a Consumer's
	// settle stage is handed the same one.
	obs *observer
	// completed holds the records this Guard completed or found
	// completed lately, when the cache is on.
	completed *cache.Cache
	ownerID   string
	seq       atomic.Uint64
	renewals  sync.Pool // of *renewal, stopped

	writes writeKind     // the business writes the Store commits
	outbox outboxSupport // whether the Store commits outgoing messages
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
	// A nil pointer or func in a non-nil interface (a Store whose
	// constructor's error went unread, a nil HandlerFunc) is refused here,
	// not at the first message.
	if configerr.NilValue(store) || configerr.NilValue(h) {
		return nil, configError("a nil Store (%T) or Handler (%T)", store, h)
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
	if cfg.sendsOnward && caps.Outbox == nil {
		return nil, fmt.Errorf("consumer: %w: %w", ErrInvalidConfig, &OutboxUnsupportedError{Store: fmt.Sprintf("%T", store)})
	}
	if err := dedup.CheckNamespace(cfg.namespace); err != nil {
		return nil, fmt.Errorf("consumer: %w: %w", ErrInvalidConfig, err)
	}
	obs, err := newObserver(&cfg)
	if err != nil {
		return nil, err
	}
	g := &Guard{cfg: cfg, store: safeStore{s: store, log: cfg.logger}, oneShot: cfg.oneRoundTrip, handler: h, obs: obs}
	obs.mon = newMonitor(&g.cfg)
	g.writes = writeKind{store: fmt.Sprintf("%T", store), kind: caps.Writes}
	g.outbox = outboxSupport{store: fmt.Sprintf("%T", store), ok: caps.Outbox != nil}
	if cfg.sendsOnward {
		g.outbox.view = caps.Outbox
	}
	if cfg.cacheEntries > 0 {
		completed, err := cache.New(cfg.cacheEntries, cfg.cacheBytes, cache.MaxAge(cfg.cacheMaxAge))
		if err != nil {
			return nil, fmt.Errorf("consumer: %w", err)
		}
		g.completed = completed
		if err := obs.tel.observeCache(g.completed); err != nil {
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
// can be read), and with SendsOnward its outbox's, bounded by
// CheckTimeout. An error wraps ErrMisconfigured. Consumer.Run calls it;
// call it before a receive loop that uses Process.
func (g *Guard) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.checkTimeout)
	defer cancel()
	what, err := g.checkStore(ctx)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMisconfigured, what, err)
	}
	return nil
}

// checkStore runs the store's checks once: the error is the store's own,
// what names the part that failed.
func (g *Guard) checkStore(ctx context.Context) (what string, err error) {
	if err := g.store.Check(ctx); err != nil {
		return "store", err
	}
	if err := g.outbox.checkOutbox(ctx, g.cfg.logger); err != nil {
		return "store's outbox", err
	}
	return "", nil
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
	o, _ := g.process(ctx, m, nil)
	return o
}

// run is what a Consumer's pool shares with the guard while it runs a
// message (nil for Guard.Process).
type run struct {
	// settle is the settle stage, which sends a dead letter while the
	// lease is still held, so that a copy no destination takes can be
	// kept in the store instead.
	settle deadLetterSender
	// stores bounds store calls with deadlines shared by the calls begun
	// within one second: a context and a timer per call would cost more
	// than the rest of the memory pipeline.
	stores *sharedDeadlines
	// leasedSince is when the leased handler began (Unix ns; 0: none
	// runs): the pool stops extending the delivery of a handler that ran
	// past its lease renewals.
	leasedSince atomic.Int64
	// handlers is the deadlines shared by the handlers its worker begins
	// within one window (handlerContext); nil: one of the handler's own.
	handlers *sharedDeadlines
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
	// sent is what became of a dead letter sent while the lease was held,
	// for the settle stage.
	sent heldDeadLetter
}

// deadLetterSender is the settle stage as the Guard sees it: the one
// Source call the Guard makes, through it, while it holds a lease. Every
// other Source call is the settle stage's, from the outcome.
type deadLetterSender interface {
	sendDeadLetter(ctx context.Context, m *Message, reason string) error
}

// heldDeadLetter is what became of a dead letter the Guard had sent while
// it held the lease, and so what is left for the settle stage to do.
type heldDeadLetter struct {
	fate deadLetterFate
	err  error // why the send, or the store's keeping, failed
}

type deadLetterFate uint8

const (
	deadLetterUnsent deadLetterFate = iota // the settle stage sends it
	deadLetterSent
	deadLetterKept   // kept in the store as DEAD_LETTER: release it
	deadLetterFailed // neither sent nor kept: the broker keeps it
)

// process is the message's flow through the guard, top to bottom: key →
// claim → handle → commit (one-round-trip mode: key → handle →
// claim-and-commit), a step to a file (keys.go, claim.go, handle.go,
// commit.go; fail.go when a step fails). The outcome is observed (span,
// metrics, hooks, log) before it is returned, with what the settle stage
// must know of a dead letter sent under the lease.
func (g *Guard) process(ctx context.Context, m *Message, r *run) (Outcome, heldDeadLetter) {
	var start time.Time
	if len(g.obs.hooks.outcome) > 0 {
		start = time.Now()
	}
	ctx, span := g.obs.tel.startProcess(ctx, m)
	a := &attempt{g: g, m: m, ctx: ctx, span: span, run: r}
	o := a.do()
	g.obs.tel.endProcess(ctx, span, m, o)
	g.obs.mon.counted(o)
	if len(g.obs.hooks.outcome) > 0 {
		took := time.Since(start)
		for _, h := range g.obs.hooks.outcome {
			h.OnMessageOutcome(ctx, m, o, took)
		}
	}
	if o.Kind != Processed && o.Kind != Duplicate {
		g.cfg.logger.LogAttrs(ctx, logLevel(o.Kind), "message outcome",
			slogKind(o), slogKey(o.IdempotencyKey), slogID(m), slogErr(o.Err))
	}
	return o, a.sent
}

func (a *attempt) do() Outcome {
	g := a.g
	key, hash, err := g.keys(a.m)
	if err != nil {
		return Outcome{Kind: DeadLettered, Err: err}
	}
	a.m.IdempotencyKey, a.hash = key, hash
	a.o = Outcome{IdempotencyKey: key}
	now := g.cfg.clock.Now()
	// A duplicate of a key completed here lately makes no store call (and
	// in one-round-trip mode runs no handler).
	if r, ok := g.recall(key, now); ok {
		return a.existing(now, r, false)
	}
	if g.oneShot {
		// Handle, then claim and commit in one call.
		a.runs = a.m.Deliveries
	} else if o, held := a.claim(now); !held {
		return o
	}
	res, err := a.runHandler()
	if err != nil {
		return a.handlerFailed(err)
	}
	return a.commit(res)
}

// nextOwner is a new owner token: the Guard's random ID and a sequence.
func (g *Guard) nextOwner() string {
	b := make([]byte, 0, 32)
	b = strconv.AppendUint(append(b, g.ownerID...), g.seq.Add(1), 36)
	return string(b)
}
