package consumer

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/retry"
)

// Consumer runs a Handler over a Source through a Guard.
type Consumer struct {
	cfg     config
	src     Source
	guard   *Guard
	caps    Capabilities
	started atomic.Bool
}

// New validates the options and returns a Consumer. Run starts it.
func New(src Source, store dedup.Store, h Handler, opts ...Option) (*Consumer, error) {
	if src == nil {
		return nil, configError("a Source is required")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.maxInFlight == 0 {
		cfg.maxInFlight = 2 * cfg.concurrency
	}
	caps := src.Capabilities()
	cfg.handLogger(src)
	if !caps.DeadLetter && !cfg.noDeadLetter {
		return nil, configError("the Source has no dead-letter destination: give it one (SQS: a dead-letter queue or redrive policy; Kafka: a dead-letter topic), or pass WithoutDeadLetters")
	}
	if caps.DefaultKey != nil && cfg.keyFunc == nil {
		cfg.keyFunc, cfg.keyCoversBody = caps.DefaultKey, caps.KeyCoversBody
	}
	if window := caps.RedeliveryWindow; window > 0 {
		if !cfg.retentionSet && cfg.retention <= window {
			// A duplicate may arrive as late as the source redelivers, so
			// the record must outlive that; said once, since inspect and
			// the table will show the longer expiry.
			cfg.retention = window + time.Hour
			cfg.logger.Info("completed records kept longer than the default retention, to outlive the source's redelivery window",
				slog.Duration("retention", cfg.retention), slog.Duration("redelivery_window", window))
		}
		if cfg.retention <= window {
			return nil, configError("Retention %v: the source may redeliver for %v, so a late duplicate would run again",
				cfg.retention, window)
		}
	}
	g, err := newGuard(cfg, store, h)
	if err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg, src: src, guard: g, caps: caps}, nil
}

// Run checks the Store and the Source (see Check), then receives and
// processes messages until ctx is cancelled, the source closes, or a
// configuration fault stops it. On stopping it stops receiving, gives
// in-flight handlers up to DrainTimeout, settles what they finished, gives
// back what never started and closes the Source. It returns nil after a
// cancel, or the error that stopped it: one wrapping ErrMisconfigured for
// a fault of the deployment. A Consumer runs once.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	if err := c.Check(ctx); err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.drainTimeout)
		defer cancel()
		_ = c.src.Close(closeCtx)
		if ctx.Err() != nil {
			return nil // cancelled while checking: a stop, not a fault
		}
		return err
	}
	if h, ok := c.src.(CommitHolder); ok {
		// Records completed behind a held message expire Retention after
		// they completed; stopping at 3/4 of it leaves the operator a
		// quarter of Retention to mend what holds it before a restart
		// would replay them as new.
		h.LimitCommitHold(c.cfg.retention / 4 * 3)
	}
	r := newPool(c)
	return r.serve(ctx)
}

// Check runs the Store's and the Source's checks (the table exists with the
// right layout, the queue or topic and the dead-letter destination can be
// reached), each bounded by CheckTimeout. An error wraps ErrMisconfigured.
// Run calls it before the first receive.
func (c *Consumer) Check(ctx context.Context) error {
	if err := c.guard.Check(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.checkTimeout)
	defer cancel()
	if err := c.src.Check(ctx); err != nil {
		return fmt.Errorf("%w: source: %w", ErrMisconfigured, err)
	}
	return nil
}

// orderKey is what the consumer serializes on. The destination is part of
// it: partition 0 of one topic and partition 0 of another are unrelated.
type orderKey struct {
	destination string
	partition   int32
	key         string
}

// slot is one held message.
type slot struct {
	r          *pool
	sh         *poolShard // holds it, and its key
	m          *Message
	key        orderKey
	started    bool
	lastSource time.Time
	retry      *time.Timer
	// waitSince is when the message first found its key held by another
	// worker (zero if it has not).
	waitSince time.Time
	// holds counts in-place holds through a store outage, for backoff.
	holds int
	// runs counts the handler contexts made, so that only the first is
	// the one in the slot (a context may outlive its run).
	runs     int
	firstCtx handlerCtx

	// mu guards the running handler's fields, which its worker writes and
	// the heartbeat reads: a lock of the slot's own, so that the worker
	// does not contend for the shard's.
	mu     sync.Mutex
	lease  dedup.Lease
	leased bool
	// hctx or cancel ends the running handler's context.
	hctx      *handlerCtx
	cancel    context.CancelFunc
	lastLease time.Time
	// handlerStart is when the leased handler began: renewals stop at
	// HandlerTimeout plus a grace after it.
	handlerStart time.Time
}

// slotTracker tells the shared heartbeat about a slot's lease.
type slotTracker struct{ s *slot }

func (t slotTracker) leased(l dedup.Lease, now time.Time) {
	s := t.s
	s.mu.Lock()
	s.lease, s.leased, s.lastLease, s.handlerStart = l, true, now, now
	s.mu.Unlock()
}

// handlerContext bounds a handler by HandlerTimeout. When the handler's
// context carries nothing of its own (no span, no extracted trace), it is
// a cancel scope under a shared deadline, kept in the slot: no timer and
// no allocation per message.
func (t slotTracker) handlerContext(ctx context.Context, timeout time.Duration, now time.Time) context.Context {
	s := t.s
	if ctx != s.r.handlerCtx {
		hctx, cancel := context.WithTimeout(ctx, timeout)
		s.mu.Lock()
		s.hctx, s.cancel = nil, cancel
		s.mu.Unlock()
		return hctx
	}
	hc := &s.firstCtx
	if s.runs > 0 {
		hc = new(handlerCtx)
	}
	s.runs++
	hc.parent = s.r.handlerDeadlines.get(now)
	s.mu.Lock()
	s.hctx, s.cancel = hc, nil
	s.mu.Unlock()
	return hc
}

func (t slotTracker) handlerDone() {
	s := t.s
	s.mu.Lock()
	hc, cancel := s.hctx, s.cancel
	s.hctx, s.cancel = nil, nil
	s.mu.Unlock()
	stopHandler(hc, cancel)
}

// stopHandler cancels a handler's context, whichever kind it is.
func stopHandler(hc *handlerCtx, cancel context.CancelFunc) {
	if hc != nil {
		hc.cancel()
	}
	if cancel != nil {
		cancel()
	}
}

func (t slotTracker) storeContext(now time.Time) (context.Context, context.CancelFunc) {
	return t.s.r.settles.get(now), func() {}
}

func (t slotTracker) deadLetter(ctx context.Context, reason string) error {
	return t.s.r.c.src.DeadLetter(ctx, t.s.m, reason)
}

func (t slotTracker) unleased() {
	s := t.s
	s.mu.Lock()
	s.leased = false
	s.mu.Unlock()
}

// handlerCtx is a handler's context under a shared deadline: a cancel
// scope that costs nothing until the handler asks for its Done channel or
// derives a context from it, when it becomes a context.WithCancel of the
// shared one. Most handlers pass it to calls that do; a handler that does
// not pays nothing.
type handlerCtx struct {
	parent context.Context // set before the handler sees it

	mu          sync.Mutex
	inner       context.Context // made on first need
	cancelInner context.CancelFunc
	err         error // cancelled before inner was made
}

func (c *handlerCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }
func (c *handlerCtx) Value(key any) any           { return c.parent.Value(key) }
func (c *handlerCtx) Done() <-chan struct{}       { return c.made().Done() }

func (c *handlerCtx) Err() error {
	c.mu.Lock()
	inner, err := c.inner, c.err
	c.mu.Unlock()
	switch {
	case inner != nil:
		return inner.Err()
	case err != nil:
		return err
	}
	return c.parent.Err()
}

// AfterFunc lets contexts derived from this one, and context.AfterFunc,
// hang on it without a goroutine each.
func (c *handlerCtx) AfterFunc(f func()) (stop func() bool) {
	return context.AfterFunc(c.made(), f)
}

func (c *handlerCtx) String() string { return "consumer.handlerContext" }

func (c *handlerCtx) made() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.cancelInner = context.WithCancel(c.parent)
		if c.err != nil {
			c.cancelInner()
		}
	}
	return c.inner
}

func (c *handlerCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner != nil {
		c.cancelInner()
	} else if c.err == nil {
		c.err = context.Canceled
	}
}

type keyQueue struct{ pending []*slot }

// pool is one Run of a Consumer: its workers, the messages it holds, the
// per-key queues and the shared heartbeat.
//
// What it holds is split into shards by ordering key (round robin when
// unordered), each under its own lock: receiving, handing off, settling
// and releasing a message lock only its shard, which the workers share
// only when their messages fall in it. The count held, the drain flag and
// the signals built on them are atomics.
type pool struct {
	c    *Consumer
	work chan *slot

	// handlerCtx outlives Run's context by the drain: handlers keep going
	// until DrainTimeout, then it is cancelled.
	handlerCtx    context.Context
	cancelHandler context.CancelFunc

	limiter *limiter      // nil with WithoutAdaptiveConcurrency
	drained chan struct{} // closed when the drain starts

	// settles bound settle calls (store transitions, source acks,
	// heartbeats): they outlive Run's context, so that a drain can still
	// record its work. Each gets between settleTimeout and
	// settleTimeout+settleWindow.
	settles sharedDeadlines
	// handlerDeadlines end handlers HandlerTimeout after they start, up
	// to handlerWindow early.
	handlerDeadlines sharedDeadlines

	shards []poolShard // a power of two of them
	seed   maphash.Seed
	next   uint64 // the unordered round robin; fetch's own

	held      atomic.Int64
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

// poolShard is the held messages of some keys.
type poolShard struct {
	mu   sync.Mutex
	held map[*slot]struct{}
	keys map[orderKey]*keyQueue // a key present is busy; nil: none waiting
	_    [64]byte               // apart from the next shard's lock
}

// shardsFor is how many shards a pool of n workers gets: enough that two
// workers rarely meet on one.
func shardsFor(n int) int {
	s := 1
	for s < 4*n {
		s <<= 1
	}
	return s
}

func (r *pool) shardOf(k orderKey) *poolShard {
	if r.c.caps.Ordering == Unordered {
		r.next++
		return &r.shards[r.next&uint64(len(r.shards)-1)]
	}
	return &r.shards[maphash.Comparable(r.seed, k)&uint64(len(r.shards)-1)]
}

func newPool(c *Consumer) *pool {
	r := &pool{c: c, work: make(chan *slot, c.cfg.maxInFlight),
		shards: make([]poolShard, shardsFor(c.cfg.concurrency)), seed: maphash.MakeSeed(),
		space: make(chan struct{}, 1), empty: make(chan struct{}), drained: make(chan struct{})}
	for i := range r.shards {
		r.shards[i].held, r.shards[i].keys = map[*slot]struct{}{}, map[orderKey]*keyQueue{}
	}
	r.handlerCtx, r.cancelHandler = context.WithCancel(context.Background())
	if !c.cfg.fixedConcurrency {
		r.limiter = newLimiter(c.cfg.concurrency, r.reportLimit)
		// Stores report the throttles they retry through the context.
		r.handlerCtx = retry.WithObserver(r.handlerCtx, func(class retry.Class, _ error) {
			if class == retry.Throttled {
				r.limiter.throttled(time.Now())
			}
		})
	}
	r.settles = sharedDeadlines{parent: context.WithoutCancel(r.handlerCtx),
		window: settleWindow, after: settleTimeout + settleWindow}
	r.handlerDeadlines = sharedDeadlines{parent: r.handlerCtx,
		window: handlerWindow(c.cfg.handlerTimeout), after: c.cfg.handlerTimeout}
	return r
}

func (r *pool) serve(ctx context.Context) error {
	cfg := &r.c.cfg
	var workers sync.WaitGroup
	for range cfg.concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for s := range r.work {
				r.handle(s)
			}
		}()
	}
	hbStop := make(chan struct{})
	hbDone := make(chan struct{})
	go r.heartbeat(hbStop, hbDone)

	fetchCtx, stopFetch := context.WithCancel(ctx)
	r.faultMu.Lock()
	r.stopFetch = stopFetch
	r.faultMu.Unlock()
	fetchErr := r.fetch(fetchCtx)
	stopFetch()

	// Drain: nothing new starts; what runs gets until the deadline.
	drainStart := time.Now()
	r.draining.Store(true) // before any shard is locked: each sees it
	close(r.drained)
	var unstarted []*slot
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		for s := range sh.held {
			if s.retry != nil && s.retry.Stop() {
				unstarted = append(unstarted, s)
			}
		}
		for _, q := range sh.keys {
			if q != nil {
				unstarted = append(unstarted, q.pending...)
				q.pending = nil
			}
		}
		sh.mu.Unlock()
	}
	for _, s := range unstarted {
		r.giveBack(s)
	}
	reserve := min(time.Second, cfg.drainTimeout/5)
	r.waitEmpty(cfg.drainTimeout - reserve)
	r.cancelHandler()
	r.waitEmpty(reserve)
	close(r.work)
	workers.Wait()
	close(hbStop)
	<-hbDone
	r.settles.stop()
	r.handlerDeadlines.stop()

	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(cfg.drainTimeout-time.Since(drainStart), time.Second))
	defer cancel()
	closeErr := r.c.src.Close(closeCtx)
	r.faultMu.Lock()
	fatal := r.fatal
	r.faultMu.Unlock()
	if fatal != nil {
		return fatal // wraps ErrMisconfigured
	}
	if fetchErr != nil {
		return fetchErr
	}
	if closeErr != nil {
		return fmt.Errorf("consumer: closing source: %w", closeErr)
	}
	return nil
}

func (r *pool) waitEmpty(d time.Duration) {
	if r.held.Load() == 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.empty:
	case <-t.C:
	}
}

// fetch receives while there is room, until ctx ends or the source fails
// for good.
func (r *pool) fetch(ctx context.Context) error {
	cfg := &r.c.cfg
	failures := 0
	for {
		free, ok := r.waitFree(ctx)
		if !ok {
			return nil
		}
		msgs, err := r.c.src.Receive(ctx, free)
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
			delay := min(100*time.Millisecond<<min(failures, 6), 5*time.Second)
			cfg.logger.WarnContext(ctx, "receive failed", "error", err.Error(), "retry_in", delay)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
			continue
		}
		failures = 0
		now := time.Now()
		n := r.held.Add(int64(len(msgs)))
		for _, m := range msgs {
			s := &slot{r: r, m: m, lastSource: now}
			switch r.c.caps.Ordering {
			case OrderByKey:
				s.key = orderKey{m.Origin.Destination, m.Origin.Partition, m.OrderingKey}
			case OrderByPartition:
				s.key = orderKey{destination: m.Origin.Destination, partition: m.Origin.Partition}
			}
			s.sh = r.shardOf(s.key)
			s.sh.mu.Lock()
			s.sh.held[s] = struct{}{}
			r.dispatchLocked(s)
			s.sh.mu.Unlock()
		}
		r.reportInFlight(int(n))
	}
}

// waitFree blocks until fewer than MaxInFlight messages are held and says
// how many more may be taken.
func (r *pool) waitFree(ctx context.Context) (int, bool) {
	for {
		free := r.c.cfg.maxInFlight - int(r.held.Load())
		if free > 0 {
			return free, ctx.Err() == nil
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-r.space:
		}
	}
}

// dispatchLocked hands s to a worker, or queues it behind its key; s's
// shard is locked. The work channel holds MaxInFlight, so a send never
// blocks.
func (r *pool) dispatchLocked(s *slot) {
	if r.c.caps.Ordering == Unordered {
		r.work <- s
		return
	}
	keys := s.sh.keys
	if q, busy := keys[s.key]; busy {
		if q == nil {
			q = &keyQueue{}
			keys[s.key] = q
		}
		q.pending = append(q.pending, s)
		return
	}
	keys[s.key] = nil // busy, none waiting: a queue is made once one waits
	r.work <- s
}

func (r *pool) handle(s *slot) {
	if r.limiter != nil && !r.limiter.acquire(r.drained) {
		r.giveBack(s)
		return
	}
	s.sh.mu.Lock()
	if r.draining.Load() {
		s.sh.mu.Unlock()
		r.giveBack(s)
		r.releaseLimit(time.Now())
		return
	}
	s.started, s.retry = true, nil
	s.sh.mu.Unlock()

	o, end := r.c.guard.process(r.handlerCtx, s.m, slotTracker{s})
	// Taken after the handler and the store calls, however long they ran:
	// the settle's own deadline starts at their end.
	r.settle(r.settles.get(end), s, o)
	r.releaseLimit(end)
}

func (r *pool) releaseLimit(now time.Time) {
	if r.limiter != nil {
		r.limiter.release(now)
	}
}

// settle carries out the outcome's action on the source.
func (r *pool) settle(ctx context.Context, s *slot, o Outcome) {
	cfg := &r.c.cfg
	src := r.c.src
	var err error
	action := o.Action()
	switch o.Kind {
	case Misconfigured:
		r.stop(o.Err)
	case StoreUnavailable:
		// Hold the message through the outage: no redelivery, no receive
		// counted by the broker, and receiving pauses once MaxInFlight
		// messages are held.
		s.holds++
		if r.holdInPlace(s, max(o.RetryAfter, r.c.guard.retryDelay(s.holds)), false) {
			r.reportSettled(ctx, s.m, action, nil)
			return
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
		if (o.RetryAfter <= cfg.pendingRecheck || now.Sub(s.waitSince)+wait <= cfg.handlerTimeout) &&
			r.holdInPlace(s, wait, false) {
			r.reportSettled(ctx, s.m, action, nil)
			return
		}
	}
	switch action {
	case Ack:
		err = src.Ack(ctx, s.m)
	case DeadLetter:
		switch o.deadLetter {
		case deadLetterSent:
			// Sent and settled by the source while the lease was held.
		case deadLetterKept:
			// Kept in the store, never to run again: released where the
			// broker keeps it readable (a Kafka log), else given back to
			// the broker's own redrive, spending a receive each time.
			// The settle counts as a failed dead letter when the copy was
			// refused now.
			r.c.guard.tel.keptDead.Add(ctx, 1)
			if r.c.caps.Replayable {
				err = src.Ack(ctx, s.m)
			} else {
				err = src.Nack(ctx, s.m, cfg.maxRetryDelay)
			}
			err = errors.Join(o.deadLetterErr, err)
		case deadLetterFailed:
			err = errors.Join(o.deadLetterErr, src.Nack(ctx, s.m, cfg.maxRetryDelay))
		default:
			err = r.sendDeadLetter(ctx, s, o)
		}
	case Retry:
		if r.c.caps.Ordering != Unordered && r.holdInPlace(s, o.RetryAfter, true) {
			r.reportSettled(ctx, s.m, action, nil)
			return
		}
		err = src.Nack(ctx, s.m, o.RetryAfter)
	}
	r.reportSettled(ctx, s.m, action, err)
	if err != nil && action != DeadLetter {
		cfg.logger.WarnContext(ctx, "settle failed", "action", action.String(), slogID(s.m), slogErr(err))
	}
	r.release(s)
}

// sendDeadLetter sends a dead letter the guard left to the outcome (no
// lease was held: the key could not be made, or it was reused).
func (r *pool) sendDeadLetter(ctx context.Context, s *slot, o Outcome) error {
	err := r.c.src.DeadLetter(ctx, s.m, o.Reason())
	if err != nil {
		// No dead-letter destination took it: keep the message rather
		// than lose it, and say so loudly. It is counted as a failed
		// dead letter (settles with result "error"), not a dead letter.
		r.c.cfg.logger.ErrorContext(ctx, "dead letter failed; message kept", slogID(s.m), slogKey(o.IdempotencyKey), slogErr(err))
		_ = r.c.src.Nack(ctx, s.m, r.c.cfg.maxRetryDelay)
	}
	return err
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

// holdInPlace keeps a message, and so its key, and runs it again after
// delay: for ordered sources, so that its successors cannot overtake it
// (redelivery: it counts as a delivery), and through store outages.
func (r *pool) holdInPlace(s *slot, delay time.Duration, redelivery bool) bool {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	if r.draining.Load() {
		return false
	}
	if redelivery {
		s.m.Deliveries++
	}
	s.started = false
	s.retry = time.AfterFunc(delay, func() {
		s.sh.mu.Lock()
		if r.draining.Load() {
			s.sh.mu.Unlock()
			r.giveBack(s)
			return
		}
		r.work <- s
		s.sh.mu.Unlock()
	})
	return true
}

// giveBack returns a message that was never started to the source at once.
func (r *pool) giveBack(s *slot) {
	ctx := r.settles.get(time.Now())
	err := r.c.src.Nack(ctx, s.m, 0)
	r.reportSettled(ctx, s.m, Retry, err)
	r.release(s)
}

// release forgets s and lets its key's next message run.
func (r *pool) release(s *slot) {
	sh := s.sh
	sh.mu.Lock()
	delete(sh.held, s)
	if r.c.caps.Ordering != Unordered {
		if q, busy := sh.keys[s.key]; busy {
			if q != nil && len(q.pending) > 0 && !r.draining.Load() {
				next := q.pending[0]
				q.pending = q.pending[1:]
				r.work <- next
			} else {
				delete(sh.keys, s.key)
			}
		}
	}
	sh.mu.Unlock()
	n := r.held.Add(-1)
	if n == 0 && r.draining.Load() {
		r.emptyOnce.Do(func() { close(r.empty) })
	}
	select {
	case r.space <- struct{}{}:
	default:
	}
	r.reportInFlight(int(n))
}

func (r *pool) reportLimit(n int) {
	r.c.guard.tel.limit.Record(context.Background(), int64(n))
	for _, h := range r.c.guard.hooks.limit {
		h.OnPoolConcurrencyLimit(n)
	}
}

func (r *pool) reportInFlight(n int) {
	r.c.guard.tel.inFlight.Record(context.Background(), int64(n))
	for _, h := range r.c.guard.hooks.inFlight {
		h.OnPoolInFlight(n)
	}
}

func (r *pool) reportSettled(ctx context.Context, m *Message, a Action, err error) {
	r.c.guard.tel.settled(ctx, m, a, err)
	for _, h := range r.c.guard.hooks.settle {
		h.OnMessageSettled(ctx, m, a, err)
	}
}

const settleWindow = time.Second

// handlerWindow is how much earlier than HandlerTimeout a handler may be
// stopped: 1%, at most 100ms.
func handlerWindow(timeout time.Duration) time.Duration {
	return min(max(timeout/100, time.Millisecond), 100*time.Millisecond)
}

// sharedDeadlines hands out contexts with a deadline, shared by the calls
// begun within one window: a context and a timer per message cost more
// than the rest of the hot path. A context handed out at t has its
// deadline between t+after-window and t+after.
type sharedDeadlines struct {
	parent        context.Context // set once, before any worker starts
	window, after time.Duration
	cur           atomic.Pointer[sharedDeadline]
	mu            sync.Mutex
	live          []*sharedDeadline // not yet past their deadline
}

type sharedDeadline struct {
	ctx      context.Context
	cancel   context.CancelFunc
	until    time.Time // handed out before then
	deadline time.Time
}

func (s *sharedDeadlines) get(now time.Time) context.Context {
	if c := s.cur.Load(); c != nil && now.Before(c.until) {
		return c.ctx
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cur.Load(); c != nil && now.Before(c.until) {
		return c.ctx
	}
	kept := s.live[:0]
	for _, c := range s.live {
		if now.Before(c.deadline) {
			kept = append(kept, c)
		} else {
			c.cancel() // past its deadline: only releases it
		}
	}
	clear(s.live[len(kept):])
	s.live = kept
	c := &sharedDeadline{until: now.Add(s.window), deadline: now.Add(s.after)}
	c.ctx, c.cancel = context.WithDeadline(s.parent, c.deadline)
	s.live = append(s.live, c)
	s.cur.Store(c)
	return c.ctx
}

// stop releases the contexts once no call can be using them.
func (s *sharedDeadlines) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.live {
		c.cancel()
	}
	s.live = nil
	s.cur.Store(nil)
}

// heartbeat renews, for every held message, the source's delivery timeout
// and, while its handler runs, the lease: one goroutine for all messages.
func (r *pool) heartbeat(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	cfg := &r.c.cfg
	hb := heartbeatTimes{leaseEvery: cfg.leaseTTL / 3, renewFor: cfg.renewFor()}
	tick := hb.leaseEvery / 2
	if r.c.caps.DeliveryTimeout > 0 {
		hb.srcTimeout = r.c.caps.DeliveryTimeout
		hb.srcEvery = hb.srcTimeout / 2
		tick = min(tick, hb.srcTimeout/4)
	}
	tick = max(tick, 10*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	var batch []due
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now()
		batch = batch[:0]
		for i := range r.shards {
			sh := &r.shards[i]
			sh.mu.Lock()
			for s := range sh.held {
				if d, ok := hb.due(s, now); ok {
					batch = append(batch, d)
				}
			}
			sh.mu.Unlock()
		}
		for _, d := range batch {
			ctx := r.settles.get(now)
			if d.source {
				err := r.c.src.Extend(ctx, d.s.m, hb.srcTimeout)
				r.reportHeartbeat(ctx, d.s.m, false, err)
			}
			if d.renew {
				err := r.c.guard.extendLease(ctx, d.lease)
				r.reportHeartbeat(ctx, d.s.m, true, err)
				if errors.Is(err, dedup.ErrLeaseLost) {
					stopHandler(d.hctx, d.cancel) // another worker owns the key: stop this handler
				}
			}
		}
	}
}

// heartbeatTimes is how often the heartbeat renews what (srcEvery 0: the
// source has no delivery timeout to extend).
type heartbeatTimes struct {
	leaseEvery, renewFor, srcTimeout, srcEvery time.Duration
}

// due is what one held message needs renewed.
type due struct {
	s      *slot
	lease  dedup.Lease
	hctx   *handlerCtx
	cancel context.CancelFunc
	source bool
	renew  bool
}

func (hb heartbeatTimes) due(s *slot, now time.Time) (due, bool) {
	d := due{s: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leased && now.Sub(s.handlerStart) > hb.renewFor {
		// A handler that ignores its context: let its lease and its
		// delivery run out, so another worker can take over.
		return d, false
	}
	if hb.srcEvery > 0 && now.Sub(s.lastSource) >= hb.srcEvery {
		d.source, s.lastSource = true, now
	}
	if s.leased && now.Sub(s.lastLease) >= hb.leaseEvery {
		d.renew, d.lease, d.hctx, d.cancel, s.lastLease = true, s.lease, s.hctx, s.cancel, now
	}
	return d, d.source || d.renew
}

func (r *pool) reportHeartbeat(ctx context.Context, m *Message, lease bool, err error) {
	r.c.guard.tel.heartbeat(ctx, lease, err)
	for _, h := range r.c.guard.hooks.heartbeat {
		h.OnMessageHeartbeat(ctx, m, lease, err)
	}
}
