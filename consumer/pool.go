package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/retry"
)

// pool is one Run of a Consumer: its workers, the messages it holds, the
// per-key queues and the loop that extends their deliveries. It receives;
// every other Source call is its settle stage's.
//
// What it holds is under one lock (mu), taken once per take from the
// Source and once per message released; the count held and the drain flag
// are atomics. Locks split by ordering key and padded apart were measured
// no faster in the memory pipeline (BenchmarkMemoryPipeline), and so gave
// way; the figures are in BENCHMARKS.md.
type pool struct {
	c      *Consumer
	work   chan *slot
	settle *settleStage
	obs    *observer

	// handlerCtx outlives Run's context by the drain: handlers keep going
	// until DrainTimeout, then it is cancelled.
	handlerCtx    context.Context
	cancelHandler context.CancelFunc
	// settles bound settle calls (store transitions, source acks,
	// extensions): they outlive Run's context, so that a drain can still
	// record its work. cancelSettles ends them at a stop cut short by a
	// dependency that is down.
	settles       sharedDeadlines
	cancelSettles context.CancelFunc

	limiter *limiter      // nil with WithoutAdaptiveConcurrency
	drained chan struct{} // closed when the drain starts

	mu    sync.Mutex
	first *slot                // the messages held, a list through their prev and next
	keys  map[orderKey][]*slot // a key present is busy, with those waiting behind it

	// receivers is how many goroutines receive: one per core for an
	// unordered source, one for an ordered source, since the order messages
	// are handed on in is the order their keys run in.
	receivers int
	held      atomic.Int64
	// taken is held plus the room reserved by Receives under way.
	taken     atomic.Int64
	draining  atomic.Bool
	space     chan struct{} // a slot was freed
	empty     chan struct{} // closed when draining and nothing is held
	emptyOnce sync.Once

	// stopFetch ends receiving early, when a configuration fault stops
	// the run; fatal is that fault.
	faultMu   sync.Mutex
	stopFetch context.CancelFunc
	fatal     error
}

// orderKey is what the consumer serializes on. The destination is part of
// it: partition 0 of one topic and partition 0 of another are unrelated.
type orderKey struct {
	destination string
	partition   int32
	key         string
}

// slot is one held message. Its fields but run are guarded by the pool's
// lock.
type slot struct {
	run
	m          *Message
	key        orderKey
	prev, next *slot // in the pool's list of messages held
	lastSource time.Time
	retry      *time.Timer
	// waitSince is when the message first found its key held by another
	// worker (zero if it has not).
	waitSince time.Time
	// holds counts in-place holds through a store outage, for backoff.
	holds int
}

func newPool(c *Consumer) *pool {
	r := &pool{c: c, work: make(chan *slot, c.cfg.maxInFlight), keys: map[orderKey][]*slot{},
		space: make(chan struct{}, 1), empty: make(chan struct{}), drained: make(chan struct{}), obs: c.obs, receivers: 1}
	if c.caps.Ordering == Unordered {
		r.receivers = max(min(runtime.GOMAXPROCS(0), c.cfg.concurrency), 1)
	}
	r.settle = &settleStage{src: c.src, replayable: c.caps.Replayable, keptDelay: c.cfg.maxRetryDelay, log: c.cfg.logger, obs: c.obs}
	r.handlerCtx, r.cancelHandler = context.WithCancel(context.Background())
	if !c.cfg.fixedConcurrency {
		r.limiter = newLimiter(c.cfg.concurrency, r.obs.limit)
		c.limiter.Store(r.limiter) // the Store's and Source's throttles reach it (Consumer.observe)
	}
	var settleCtx context.Context
	settleCtx, r.cancelSettles = context.WithCancel(context.WithoutCancel(r.handlerCtx))
	r.settles = sharedDeadlines{parent: settleCtx, window: time.Second, after: settleTimeout + time.Second}
	return r
}

func (r *pool) serve(ctx context.Context) error {
	cfg := &r.c.cfg
	if reg, err := r.obs.tel.observeOldest(r.oldest); err != nil {
		cfg.logger.Warn("the in-flight age metric is not reported", slogErr(err))
	} else {
		defer func() { _ = reg.Unregister() }()
	}
	var workers sync.WaitGroup
	for range cfg.concurrency {
		workers.Go(r.worker)
	}
	extendStop := make(chan struct{})
	extendDone := make(chan struct{})
	go r.extendDeliveries(extendStop, extendDone)
	r.c.mon.pool.Store(r)
	progressDone := make(chan struct{})
	go r.c.mon.logProgress(r, extendStop, progressDone)
	watchDone := make(chan struct{})
	go r.c.mon.watch(r.handlerCtx, extendStop, watchDone)

	fetchCtx, stopFetch := context.WithCancel(ctx)
	r.faultMu.Lock()
	r.stopFetch = stopFetch
	r.faultMu.Unlock()
	fetchErr := r.fetch(fetchCtx)
	stopFetch()

	// Drain: nothing new starts; what runs gets until the deadline.
	drainStart := time.Now()
	r.c.mon.setState(stateDraining)
	r.draining.Store(true) // before the lock is taken: all under it see it
	close(r.drained)
	var unstarted []*slot
	r.mu.Lock()
	for s := r.first; s != nil; s = s.next {
		if s.retry != nil && s.retry.Stop() {
			unstarted = append(unstarted, s)
		}
	}
	for k, waiting := range r.keys {
		unstarted = append(unstarted, waiting...)
		r.keys[k] = nil
	}
	r.mu.Unlock()
	for _, s := range unstarted {
		r.returnUnstarted(s)
	}
	// A dependency that is down cuts the drain short: what waits on it
	// would wait in vain, and the messages held stay with the broker and
	// the store, to be run again.
	reserve := min(time.Second, cfg.drainTimeout/5)
	down := r.waitEmptyUnlessDown(cfg.drainTimeout - reserve)
	cancelled := r.c.mon.running.Load()
	r.cancelHandler()
	r.waitEmpty(reserve)
	if down == "" {
		down = r.c.mon.dependencyDown()
	}
	close(r.work)
	if down != "" {
		workersDone := make(chan struct{})
		go func() { workers.Wait(); close(workersDone) }()
		if waitFor(workersDone, stopGrace) {
			r.cancelSettles() // store calls and acks still waiting on it
		}
	}
	workers.Wait()
	close(extendStop)
	<-extendDone
	<-progressDone
	<-watchDone
	r.settles.stop()
	r.cancelSettles()

	closeIn := min(max(cfg.drainTimeout-time.Since(drainStart), time.Second), closeGrace)
	if down != "" {
		closeIn = min(closeIn, stopGrace)
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeIn)
	defer cancel()
	leftHeld := r.held.Load()
	closeErr := r.c.src.Close(closeCtx)
	attrs := []slog.Attr{slog.Duration("took", time.Since(drainStart).Round(time.Millisecond)),
		slog.Int("returned_unstarted", len(unstarted)), slog.Int64("handlers_cancelled", max(cancelled, 0)),
		slog.Int64("left_with_broker", leftHeld)}
	if down != "" {
		attrs = append(attrs, slog.String("cut_short_by", down))
	}
	if closeErr != nil {
		attrs = append(attrs, slog.String("source_close_error", closeErr.Error()))
	}
	cfg.logger.LogAttrs(ctx, slog.LevelInfo, "stopped: messages not settled stay with the broker, to be delivered again", attrs...)
	if closeErr != nil && closeCtx.Err() != nil && errors.Is(closeErr, closeCtx.Err()) {
		// The Source's Close ran out of its bound (a final commit held up
		// by a rebalance or a broker down): what it did not commit is
		// delivered again and answered by the store. Said, not failed.
		closeErr = nil
	}
	r.faultMu.Lock()
	fatal := r.fatal
	r.faultMu.Unlock()
	switch {
	case fatal != nil:
		return fatal // wraps ErrMisconfigured
	case fetchErr != nil:
		return fetchErr
	case closeErr != nil:
		return fmt.Errorf("consumer: closing source: %w", closeErr)
	}
	return nil
}

// oldest is how long, at now, the oldest message held has been held since
// it was received; false when none is held.
func (r *pool) oldest(now time.Time) (time.Duration, bool) {
	var first time.Time
	r.mu.Lock()
	for s := r.first; s != nil; s = s.next {
		if at := s.m.ReceivedAt; !at.IsZero() && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	r.mu.Unlock()
	if first.IsZero() {
		return 0, false
	}
	return max(now.Sub(first), 0), true
}

// stopGrace bounds what a stop still waits for once a dependency is
// down: the store calls and acks under way, and the Source's Close.
// closeGrace bounds the Source's Close otherwise: its final commit or
// flush, which a group rebalance under way can hold up.
const (
	stopGrace  = 3 * time.Second
	closeGrace = 5 * time.Second
)

// waitEmptyUnlessDown waits up to d for nothing to be held, and less when
// a dependency is or goes down: then it returns what is down. Messages
// held with no handler running for stopGrace wait on calls to the store
// or the broker that do not answer: a dependency down that has not yet
// failed a call.
func (r *pool) waitEmptyUnlessDown(d time.Duration) string {
	if r.held.Load() == 0 {
		return ""
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	look := time.NewTicker(100 * time.Millisecond)
	defer look.Stop()
	var idleSince time.Time
	for {
		if down := r.c.mon.dependencyDown(); down != "" {
			return down
		}
		switch {
		case r.c.mon.running.Load() > 0:
			idleSince = time.Time{}
		case idleSince.IsZero():
			idleSince = time.Now()
		case time.Since(idleSince) >= stopGrace:
			return "calls to the store or the broker unanswered for " + stopGrace.String()
		}
		select {
		case <-r.empty:
			return ""
		case <-deadline.C:
			return ""
		case <-look.C:
		}
	}
}

func (r *pool) waitEmpty(d time.Duration) {
	if r.held.Load() > 0 {
		waitFor(r.empty, d)
	}
}

// fetch receives while there is room, until ctx ends or the source fails
// for good, and hands each message on (dispatchLocked): with r.receivers
// goroutines, so that receiving an unordered source is no one core's
// serial stage.
func (r *pool) fetch(ctx context.Context) error {
	wait := r.c.mon.awaitSource(sourceName(r.c.src))
	defer wait.stop()
	n := r.receivers
	if n == 1 {
		return r.receive(ctx, wait)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, n)
	for range n {
		go func() {
			err := r.receive(ctx, wait)
			if err != nil {
				cancel() // the source failed for good: the others stop too
			}
			errs <- err
		}()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// receive is one goroutine of fetch.
func (r *pool) receive(ctx context.Context, wait *sourceWait) error {
	failures := 0
	var slots []*slot // one take's, reused
	for {
		free, ok := r.reserve(ctx)
		if !ok {
			return nil
		}
		msgs, err := r.c.src.Receive(ctx, free)
		if unused := free - len(msgs); unused > 0 {
			r.unreserve(unused)
		}
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, ErrSourceClosed):
				return err
			case retry.Classify(err) == retry.Misconfigured:
				// The queue is gone or access was taken away: waiting will
				// not mend it.
				return fmt.Errorf("%w: receive: %w", ErrMisconfigured, err)
			}
			failures++
			wait.failed(time.Now())
			delay := min(100*time.Millisecond<<min(failures, 6), 5*time.Second)
			r.c.cfg.logger.WarnContext(ctx, "receive failed", "error", err.Error(), "retry_in", delay)
			if !sleepCtx(ctx, delay) {
				return nil
			}
			continue
		}
		failures = 0
		wait.received()
		if len(msgs) == 0 {
			continue
		}
		now := time.Now()
		r.c.mon.brokerFlowing(now)
		n := r.held.Add(int64(len(msgs)))
		slots = slots[:0]
		for _, m := range msgs {
			s := &slot{run: run{settle: r.settle, stores: &r.settles}, m: m, lastSource: now}
			switch r.c.caps.Ordering {
			case OrderByKey:
				s.key = orderKey{m.Origin.Destination, m.Origin.Partition, m.OrderingKey}
			case OrderByPartition:
				s.key = orderKey{destination: m.Origin.Destination, partition: m.Origin.Partition}
			}
			slots = append(slots, s)
		}
		// One lock for the whole take, not one a message; an unordered
		// message is handed to a worker after it, so that waking workers
		// does not hold the lock.
		r.mu.Lock()
		for _, s := range slots {
			r.holdLocked(s)
			if r.c.caps.Ordering != Unordered {
				r.dispatchLocked(s)
			}
		}
		r.mu.Unlock()
		if r.c.caps.Ordering == Unordered {
			for _, s := range slots {
				r.work <- s // never blocks: the channel holds MaxInFlight
			}
		}
		clear(slots)
		r.obs.inFlight(int(n))
	}
}

// reserve blocks until fewer than MaxInFlight messages are held or being
// received, and reserves room for one Receive: its share of the room left,
// so that the receiving goroutines wait in Receive side by side, and
// together never take more than MaxInFlight.
func (r *pool) reserve(ctx context.Context) (int, bool) {
	for {
		taken := r.taken.Load()
		if free := r.c.cfg.maxInFlight - int(taken); free > 0 {
			if ctx.Err() != nil {
				return 0, false
			}
			share := (free + r.receivers - 1) / r.receivers
			if r.taken.CompareAndSwap(taken, taken+int64(share)) {
				if share < free {
					r.signalSpace() // room for another receiving goroutine
				}
				return share, true
			}
			continue
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-r.space:
		}
	}
}

// unreserve gives back room a Receive reserved and did not fill.
func (r *pool) unreserve(n int) {
	r.taken.Add(-int64(n))
	r.signalSpace()
}

// signalSpace wakes a receiving goroutine waiting for room.
func (r *pool) signalSpace() {
	select {
	case r.space <- struct{}{}:
	default:
	}
}

// holdLocked adds s to the messages held; forgetLocked takes it out. r.mu
// is held. A list, not a map: adding and taking out are a few pointer
// writes under the pool's one lock, with no hashing.
func (r *pool) holdLocked(s *slot) {
	s.next = r.first
	if r.first != nil {
		r.first.prev = s
	}
	r.first = s
}

func (r *pool) forgetLocked(s *slot) {
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		r.first = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	}
	s.prev, s.next = nil, nil
}

// dispatchLocked hands s to a worker, or queues it behind its key; r.mu
// is held. The work channel holds MaxInFlight, so a send never
// blocks.
func (r *pool) dispatchLocked(s *slot) {
	if r.c.caps.Ordering != Unordered {
		if waiting, busy := r.keys[s.key]; busy {
			r.keys[s.key] = append(waiting, s)
			return
		}
		r.keys[s.key] = nil // busy, none waiting
	}
	r.work <- s
}

// worker runs the messages handed to it until the work channel closes.
func (r *pool) worker() {
	// A context of the worker's own: the handlers' contexts hang on it,
	// not all on one shared parent's lock.
	ctx, cancel := context.WithCancel(r.handlerCtx)
	defer cancel()
	timeout := r.c.cfg.handlerTimeout
	handlers := &sharedDeadlines{parent: ctx, window: min(timeout/10, time.Second), after: timeout}
	defer handlers.stop()
	for s := range r.work {
		s.handlers = handlers
		r.handle(ctx, s)
	}
}

// handle runs one message from a worker: the guard's key → claim →
// handle → commit, then its settle on the source (settle.go) and the
// release of its key, unless it is held in place to run again.
func (r *pool) handle(ctx context.Context, s *slot) {
	if r.limiter != nil && !r.limiter.acquire(r.drained) {
		r.returnUnstarted(s)
		return
	}
	if s.retry != nil {
		// Run again after a hold: the drain no longer has a timer to stop.
		r.mu.Lock()
		s.retry = nil
		r.mu.Unlock()
	}
	// No lock for the check: a message handed to a worker is the drain's
	// to return only while its hold's timer is pending, and it is not.
	if r.draining.Load() {
		r.returnUnstarted(s)
	} else {
		r.c.mon.begin()
		o, sent := r.c.guard.process(ctx, s.m, &s.run)
		now := time.Now()
		r.c.mon.finish(now)
		sctx := r.settles.get(now)
		if r.hold(s, o) {
			r.settle.heldInPlace(sctx, s.m, o.Action())
		} else {
			r.sourcePanicked(r.settle.settle(sctx, s.m, o, sent))
			r.release(s)
		}
	}
	if r.limiter != nil {
		r.limiter.release(time.Now())
	}
}

// hold says whether o keeps the message in place, to run again, rather
// than settling it; a configuration fault stops the run.
func (r *pool) hold(s *slot, o Outcome) bool {
	cfg := &r.c.cfg
	held := false
	switch o.Kind {
	case Misconfigured:
		r.stop(o.Err)
	case StoreUnavailable:
		// Hold the message through the outage: no redelivery, no receive
		// counted by the broker, and receiving pauses once MaxInFlight
		// messages are held.
		s.holds++
		delay := max(o.RetryAfter, cfg.retryDelay(s.holds))
		if held = r.holdInPlace(s, delay, false); held {
			r.c.mon.storeRetry(r.handlerCtx, o.Err, delay, time.Now())
		}
	case InFlightElsewhere:
		// A live holder finishes within its HandlerTimeout: look again
		// every PendingRecheck meanwhile, in place, at no delivery's cost
		// (and wait out in place a lease about to end). Past that the
		// holder is likely dead: give the message back until its lease can
		// have ended.
		now := time.Now()
		if s.waitSince.IsZero() {
			s.waitSince = now
		}
		wait := min(cfg.pendingRecheck, o.RetryAfter)
		held = (o.RetryAfter <= cfg.pendingRecheck || now.Sub(s.waitSince)+wait <= cfg.handlerTimeout) &&
			r.holdInPlace(s, wait, false)
		r.c.mon.keyWait(r.handlerCtx, s.m, o, r.c.caps.Ordering != Unordered, held, now)
	}
	if !held && o.Action() == Retry && r.c.caps.Ordering != Unordered {
		// Its successors must not overtake it.
		held = r.holdInPlace(s, o.RetryAfter, true)
	}
	return held
}

// holdInPlace keeps a message, and so its key, and runs it again after
// delay: for ordered sources, so that its successors cannot overtake it
// (redelivery: it counts as a delivery), and through store outages.
func (r *pool) holdInPlace(s *slot, delay time.Duration, redelivery bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining.Load() {
		return false
	}
	if redelivery {
		s.m.Deliveries++
	}
	s.retry = time.AfterFunc(delay, func() {
		r.mu.Lock()
		if r.draining.Load() {
			r.mu.Unlock()
			r.returnUnstarted(s)
			return
		}
		r.work <- s
		r.mu.Unlock()
	})
	return true
}

// returnUnstarted gives a message that was never started back to the
// source at once, and releases it.
func (r *pool) returnUnstarted(s *slot) {
	r.sourcePanicked(r.settle.returnUnstarted(r.settles.get(time.Now()), s.m))
	r.release(s)
}

// release forgets s and lets its key's next message run.
func (r *pool) release(s *slot) {
	r.mu.Lock()
	r.forgetLocked(s)
	if waiting, busy := r.keys[s.key]; busy && r.c.caps.Ordering != Unordered {
		if len(waiting) > 0 && !r.draining.Load() {
			r.keys[s.key] = waiting[1:]
			r.work <- waiting[0]
		} else {
			delete(r.keys, s.key)
		}
	}
	r.mu.Unlock()
	n := r.held.Add(-1)
	if n == 0 && r.draining.Load() {
		r.emptyOnce.Do(func() { close(r.empty) })
	}
	r.taken.Add(-1)
	r.signalSpace()
	r.obs.inFlight(int(n))
}

// extendDeliveries extends, for every held message, the source's delivery
// timeout: one goroutine for all messages. (A running handler's lease is
// renewed by the guard.)
func (r *pool) extendDeliveries(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	timeout := r.c.caps.DeliveryTimeout
	if timeout <= 0 {
		<-stop
		return
	}
	every, renewFor := timeout/2, r.c.cfg.renewFor()
	t := time.NewTicker(max(timeout/4, 10*time.Millisecond))
	defer t.Stop()
	var due []*slot
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now()
		due = due[:0]
		r.mu.Lock()
		for s := r.first; s != nil; s = s.next {
			// A leased handler that ignores its context past its
			// renewals: let its delivery run out too, so another worker
			// can take over.
			since := s.leasedSince.Load()
			if (since == 0 || now.Sub(time.Unix(0, since)) <= renewFor) && now.Sub(s.lastSource) >= every {
				s.lastSource = now
				due = append(due, s)
			}
		}
		r.mu.Unlock()
		for _, s := range due {
			ctx := r.settles.get(now)
			r.sourcePanicked(r.settle.extendDelivery(ctx, s.m, timeout))
		}
	}
}

// sourcePanicked stops the run when err is a panic recovered from a
// Source call: a bug of the deployment's, which the next call would meet
// again.
func (r *pool) sourcePanicked(err error) {
	if err != nil && errors.Is(err, ErrPanicked) {
		r.stop(fmt.Errorf("%w: source: %w", ErrMisconfigured, err))
	}
}

// stop ends the run for a configuration fault: receiving stops, what is
// held drains, and Run returns err. The first fault is the one reported.
func (r *pool) stop(err error) {
	r.faultMu.Lock()
	first := r.fatal == nil
	if first {
		r.fatal = err
	}
	stopFetch := r.stopFetch
	r.faultMu.Unlock()
	if first {
		r.c.cfg.logger.Error("stopping: the deployment is misconfigured; no message is blamed", slogErr(err))
		stopFetch()
	}
}
