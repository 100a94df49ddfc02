package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup"
)

// runHandler calls the handler under HandlerTimeout, its lease (if any)
// renewed meanwhile, and refuses a result returned after renewals stopped.
func (a *attempt) runHandler() (Result, error) {
	g := a.g
	start := time.Now()
	ctx, cancel := a.handlerContext(start)
	defer cancel()
	leased := a.lease.Owner != ""
	if leased {
		defer g.startRenewal(a, start, cancel).stop(&g.renewals)
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

// handlerContext is the context of a handler begun at start: it ends at
// HandlerTimeout, when a.ctx ends (a shutdown), or when cancelled (the
// lease was lost).
//
// A worker's handlers share the deadline of those it begins within one
// window (run.handlers), as long as a.ctx carries nothing of the
// message's own (a trace context): the deadline is then between
// HandlerTimeout less the window (a tenth of HandlerTimeout, at most a
// second) and HandlerTimeout after start, never later. A context and a
// timer of each handler's own (context.WithTimeout) cost more allocations
// than the shared deadline's child, on every message:
// BenchmarkMemoryPipeline keeps the difference; its figures are in
// BENCHMARKS.md.
func (a *attempt) handlerContext(start time.Time) (context.Context, context.CancelFunc) {
	if a.run != nil && a.run.handlers != nil && a.ctx == a.run.handlers.parent {
		return context.WithCancel(a.run.handlers.get(start))
	}
	return context.WithTimeout(a.ctx, a.g.cfg.handlerTimeout)
}

// renewal renews a running handler's lease every LeaseTTL/3, until the
// handler returns or it has run for renewFor, and stops the handler if the
// lease is lost.
//
// A renewal and its timer are reused (Guard.renewals): a renewal and a
// time.AfterFunc made per handler allocate on every message.
// BenchmarkLeaseRenewal sets the two side by side; its figures are in
// BENCHMARKS.md.
type renewal struct {
	mu     sync.Mutex
	a      attempt // a copy: the attempt stays on its goroutine's stack
	start  time.Time
	cancel context.CancelFunc
	timer  *time.Timer
	done   bool
}

// startRenewal starts renewing a's lease, for a handler begun at start.
func (g *Guard) startRenewal(a *attempt, start time.Time, cancel context.CancelFunc) *renewal {
	rn, _ := g.renewals.Get().(*renewal)
	if rn == nil {
		rn = &renewal{}
		rn.timer = time.AfterFunc(time.Hour, rn.renew)
		rn.timer.Stop()
	}
	rn.mu.Lock()
	rn.a, rn.start, rn.cancel, rn.done = *a, start, cancel, false
	rn.timer.Reset(g.cfg.leaseTTL / 3)
	rn.mu.Unlock()
	return rn
}

// stop ends the renewals; the renewal goes back to pool unless a renew
// may still be running.
func (rn *renewal) stop(pool *sync.Pool) {
	rn.mu.Lock()
	rn.done = true
	idle := rn.timer.Stop() // false: a renew has begun, and may still run
	if idle {
		rn.a, rn.cancel = attempt{}, nil
	}
	rn.mu.Unlock()
	if idle {
		pool.Put(rn)
	}
}

// renew extends the lease once, and schedules the next unless stopped.
func (rn *renewal) renew() {
	rn.mu.Lock()
	g := rn.a.g
	if rn.done || time.Since(rn.start) > g.cfg.renewFor() { // done: g may be gone
		// Done, or a handler that ignores its context: its lease is left
		// to run out so that another worker can take over.
		rn.mu.Unlock()
		return
	}
	rn.mu.Unlock()
	now := g.cfg.clock.Now()
	err := rn.a.storeCall(opExtend, func(ctx context.Context) error {
		return g.store.Extend(ctx, dedup.ExtendRequest{Lease: rn.a.lease, Now: now, LeaseUntil: now.Add(g.cfg.leaseTTL)})
	})
	g.obs.heartbeat(rn.a.ctx, rn.a.m, true, err)
	if errors.Is(err, dedup.ErrLeaseLost) {
		rn.cancel() // another worker owns the key now: stop this handler's work
		return
	}
	rn.mu.Lock()
	if !rn.done {
		rn.timer.Reset(g.cfg.leaseTTL / 3)
	}
	rn.mu.Unlock()
}

// callHandler runs the handler, begun at start, turning a panic into an
// error, and says how long it took.
func (g *Guard) callHandler(ctx context.Context, m *Message, start time.Time) (res Result, took time.Duration, err error) {
	ctx, span := g.obs.tel.startHandler(ctx)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrHandlerPanic, p)
			g.cfg.logger.ErrorContext(ctx, "handler panic", "panic", fmt.Sprint(p), "stack", string(debug.Stack()), slogID(m))
		}
		took = time.Since(start)
		endChild(span, err)
		g.obs.tel.handled(ctx, took, err)
		for _, h := range g.obs.hooks.handler {
			h.OnMessageHandled(ctx, m, took, err)
		}
	}()
	res, err = g.handler.Handle(ctx, m)
	return res, took, err
}
