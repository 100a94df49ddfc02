package lambdabatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/retry"
)

// Runner runs one invocation's records through the Guard.
type Runner struct {
	guard   *consumer.Guard
	capped  *cappedStore
	cfg     Config
	checked atomic.Bool
}

// New validates cfg and builds the Guard over store and h; sourceOpts (a
// source's key) come before cfg.GuardOptions, so the user's win.
func New(store dedup.Store, h consumer.Handler, cfg Config, sourceOpts ...consumer.GuardOption) (*Runner, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("%s: %w: a Store is required", cfg.Name, configerr.ErrInvalidConfig)
	}
	guardOpts := sourceOpts
	if cfg.Logger != nil {
		// First, so a logger given through WithGuardOptions wins.
		guardOpts = append([]consumer.GuardOption{consumer.WithLogger(cfg.Logger)}, guardOpts...)
	} else {
		cfg.Logger = slog.Default()
	}
	wrapped := capLeases(store, newStoreWatch(store, cfg.Name, cfg.Logger))
	g, err := consumer.NewGuard(wrapped, h, append(guardOpts, cfg.GuardOptions...)...)
	if err != nil {
		return nil, err
	}
	return &Runner{guard: g, capped: wrapped, cfg: cfg}, nil
}

// Guard is the Guard the function runs records through.
func (r *Runner) Guard() *consumer.Guard { return r.guard }

// Logger is the function's logger.
func (r *Runner) Logger() *slog.Logger { return r.cfg.Logger }

// answerReserve is how long before the invocation's deadline every call
// the function makes (store, dead letters, visibility) is cancelled: the
// time left to answer, so that a stalled call makes its record come back
// rather than the invocation time out.
const answerReserve = 250 * time.Millisecond

// CallContext bounds the calls of an invocation whose context is ctx.
func (r *Runner) CallContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if deadline, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, deadline.Add(-answerReserve))
	}
	return ctx, func() {}
}

// Record is one record of the batch and what became of it.
type Record struct {
	Msg *consumer.Message
	// Back: the record must come back (reported in batchItemFailures).
	Back bool
	// RetryAfter is when the record can succeed, when it ran and must come
	// back (the Guard's Outcome.RetryAfter); zero otherwise.
	RetryAfter time.Duration
}

// Run runs the records; each group (indexes into recs, in order) runs one
// record at a time and stops at the first record that must come back,
// marking the rest to come back too. It returns an error wrapping
// consumer.ErrMisconfigured when the deployment is at fault: the
// invocation must then fail as a whole.
func (r *Runner) Run(ctx context.Context, recs []Record, groups [][]int) error {
	now := time.Now()
	r.capped.sweep(now)
	callCtx, stopCalls := r.CallContext(ctx)
	defer stopCalls()
	defer r.capped.watch.watching(ctx)()
	if !r.checked.Load() {
		// Once per container, on its first invocation: a missing table or
		// denied access fails the invocation before any record is claimed.
		if err := r.guard.Check(callCtx); err != nil {
			if !storeDown(err) {
				return err
			}
			// The store did not answer, or answered that it is down: no
			// fault of the deployment, and none of the records, which
			// come back; the next invocation checks again.
			r.capped.watch.unavailable(ctx, checkCause(err), len(recs))
			for i := range recs {
				recs[i].Back = true
			}
			return nil
		}
		r.checked.Store(true)
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if deadline, ok := ctx.Deadline(); ok {
		var stop context.CancelFunc
		hctx, stop = context.WithDeadline(hctx, deadline.Add(-r.cfg.DeadlineMargin))
		defer stop()
		// Stores keep whole seconds, rounding up: cap on the second at or
		// before the deadline. Store calls in flight end in time to answer.
		hctx = withLimits(hctx, limits{leaseCap: deadline.Truncate(time.Second), callsEnd: deadline.Add(-answerReserve)})
		if deadline.Sub(now) <= r.cfg.DeadlineMargin {
			r.cfg.Logger.WarnContext(ctx, r.cfg.Name+": no time left to process the batch; every record comes back",
				"remaining", deadline.Sub(now).String(), "margin", r.cfg.DeadlineMargin.String())
		}
	}
	var (
		fatal     error
		fatalOnce sync.Once
	)
	stopAll := func(err error) {
		fatalOnce.Do(func() { fatal = err; cancel() })
	}
	work := make(chan []int)
	var wg sync.WaitGroup
	for range min(r.cfg.Concurrency, len(groups)) {
		wg.Go(func() {
			for g := range work {
				r.runGroup(callCtx, hctx, recs, g, stopAll)
			}
		})
	}
	for _, g := range groups {
		work <- g
	}
	close(work)
	wg.Wait()
	return fatal
}

func (r *Runner) runGroup(ctx, hctx context.Context, recs []Record, group []int, stopAll func(error)) {
	for i, j := range group {
		rec := &recs[j]
		if hctx.Err() != nil {
			markBack(recs, group[i:]) // no time left, or the invocation failed
			return
		}
		o := r.guard.Process(hctx, rec.Msg)
		if o.Kind == consumer.StoreUnavailable {
			r.capped.watch.unavailable(ctx, o.Err, 1)
		}
		if o.Kind == consumer.Misconfigured || errors.Is(o.Err, consumer.ErrMisconfigured) {
			err := o.Err
			if !errors.Is(err, consumer.ErrMisconfigured) {
				err = fmt.Errorf("%w: %w", consumer.ErrMisconfigured, err)
			}
			stopAll(err)
			markBack(recs, group[i:])
			return
		}
		if r.mustComeBack(ctx, rec.Msg, o) {
			if o.Action() == consumer.Retry {
				rec.RetryAfter = o.RetryAfter
			}
			markBack(recs, group[i:])
			return
		}
	}
}

func markBack(recs []Record, idx []int) {
	for _, j := range idx {
		recs[j].Back = true
	}
}

// mustComeBack carries out the outcome's action: it reports whether the
// record must be reported as a failure.
func (r *Runner) mustComeBack(ctx context.Context, m *consumer.Message, o consumer.Outcome) bool {
	switch o.Action() {
	case consumer.Ack:
		return false
	case consumer.DeadLetter:
		if r.cfg.DeadLetter == nil {
			r.cfg.Logger.ErrorContext(ctx, r.cfg.Name+": no dead-letter destination; record kept",
				slog.String("id", m.ID), slog.String("outcome", o.Kind.String()), slog.String("reason", o.Reason()))
			return true
		}
		if err := r.cfg.DeadLetter(ctx, m, o.Reason()); err != nil {
			r.cfg.Logger.ErrorContext(ctx, r.cfg.Name+": dead letter failed; record kept",
				slog.String("id", m.ID), slog.String("outcome", o.Kind.String()), slog.String("error", err.Error()))
			return true
		}
		r.cfg.Logger.InfoContext(ctx, r.cfg.Name+": record dead-lettered",
			slog.String("id", m.ID), slog.String("reason", o.Reason()))
		return false
	}
	r.cfg.Logger.InfoContext(ctx, r.cfg.Name+": record comes back",
		slog.String("id", m.ID), slog.String("outcome", o.Kind.String()), slog.String("retry_after", o.RetryAfter.String()))
	return true
}

// storeDown says whether a failed check failed for the store's being
// down or slow (a fault worth retrying, a throttle, a deadline), as the
// stores class their errors, rather than for the deployment (a missing
// table, denied access, a wrong layout).
func storeDown(err error) bool {
	switch retry.Classify(err) {
	case retry.Transient, retry.Throttled, retry.Cancelled:
		return true
	}
	return false
}

// checkCause is the store's error in a failed check's, which the Guard
// wraps with consumer.ErrMisconfigured: a store that is down is no fault
// of the deployment, and its line must not say so.
func checkCause(err error) error {
	if m, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range m.Unwrap() {
			if !errors.Is(e, consumer.ErrMisconfigured) {
				return e
			}
		}
	}
	return err
}
