package awslambda

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
)

// runner runs one invocation's records through the Guard.
type runner struct {
	guard   *consumer.Guard
	capped  *cappedStore
	cfg     config
	checked atomic.Bool
}

func newRunner(store dedup.Store, h consumer.Handler, opts []Option, guardOpts []consumer.GuardOption) (*runner, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("awslambda: %w: a Store is required", ErrInvalidConfig)
	}
	if cfg.logger != nil {
		// First, so a logger given through WithGuardOptions wins.
		guardOpts = append([]consumer.GuardOption{consumer.WithLogger(cfg.logger)}, guardOpts...)
	} else {
		cfg.logger = slog.Default()
	}
	wrapped := capLeases(store)
	g, err := consumer.NewGuard(wrapped, h, append(guardOpts, cfg.guardOpts...)...)
	if err != nil {
		return nil, err
	}
	return &runner{guard: g, capped: wrapped, cfg: cfg}, nil
}

// answerReserve is how long before the invocation's deadline every call
// the function makes (store, dead letters, visibility) is cancelled: the
// time left to answer, so that a stalled call makes its record come back
// rather than the invocation time out.
const answerReserve = 250 * time.Millisecond

// callContext bounds the calls of an invocation whose context is ctx.
func (r *runner) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if deadline, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, deadline.Add(-answerReserve))
	}
	return ctx, func() {}
}

// record is one record of the batch and what became of it.
type record struct {
	msg *consumer.Message
	// back: the record must come back (reported in batchItemFailures).
	back bool
	// retryAfter is when the record can succeed, when it ran and must come
	// back (the Guard's Outcome.RetryAfter); zero otherwise.
	retryAfter time.Duration
}

// run runs the records; each group (indexes into recs, in order) runs one
// record at a time and stops at the first record that must come back,
// marking the rest to come back too. It returns an error wrapping
// consumer.ErrMisconfigured when the deployment is at fault: the
// invocation must then fail as a whole.
func (r *runner) run(ctx context.Context, recs []record, groups [][]int) error {
	now := time.Now()
	r.capped.sweep(now)
	callCtx, stopCalls := r.callContext(ctx)
	defer stopCalls()
	if !r.checked.Load() {
		// Once per container, on its first invocation: a missing table or
		// denied access fails the invocation before any record is claimed.
		if err := r.guard.Check(callCtx); err != nil {
			return err
		}
		r.checked.Store(true)
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if deadline, ok := ctx.Deadline(); ok {
		var stop context.CancelFunc
		hctx, stop = context.WithDeadline(hctx, deadline.Add(-r.cfg.margin))
		defer stop()
		// Stores keep whole seconds, rounding up: cap on the second at or
		// before the deadline. Store calls in flight end in time to answer.
		hctx = withLimits(hctx, limits{leaseCap: deadline.Truncate(time.Second), callsEnd: deadline.Add(-answerReserve)})
		if deadline.Sub(now) <= r.cfg.margin {
			r.cfg.logger.WarnContext(ctx, "awslambda: no time left to process the batch; every record comes back",
				"remaining", deadline.Sub(now).String(), "margin", r.cfg.margin.String())
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
	for range min(r.cfg.concurrency, len(groups)) {
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

func (r *runner) runGroup(ctx, hctx context.Context, recs []record, group []int, stopAll func(error)) {
	for i, j := range group {
		rec := &recs[j]
		if hctx.Err() != nil {
			markBack(recs, group[i:]) // no time left, or the invocation failed
			return
		}
		o := r.guard.Process(hctx, rec.msg)
		if o.Kind == consumer.Misconfigured || errors.Is(o.Err, consumer.ErrMisconfigured) {
			err := o.Err
			if !errors.Is(err, consumer.ErrMisconfigured) {
				err = fmt.Errorf("%w: %w", consumer.ErrMisconfigured, err)
			}
			stopAll(err)
			markBack(recs, group[i:])
			return
		}
		if r.mustComeBack(ctx, rec.msg, o) {
			if o.Action() == consumer.Retry {
				rec.retryAfter = o.RetryAfter
			}
			markBack(recs, group[i:])
			return
		}
	}
}

func markBack(recs []record, idx []int) {
	for _, j := range idx {
		recs[j].back = true
	}
}

// mustComeBack carries out the outcome's action: it reports whether the
// record must be reported as a failure.
func (r *runner) mustComeBack(ctx context.Context, m *consumer.Message, o consumer.Outcome) bool {
	switch o.Action() {
	case consumer.Ack:
		return false
	case consumer.DeadLetter:
		if r.cfg.deadLetters == nil {
			r.cfg.logger.ErrorContext(ctx, "awslambda: no dead-letter destination; record kept",
				slog.String("id", m.ID), slog.String("outcome", o.Kind.String()), slog.String("reason", o.Reason()))
			return true
		}
		if err := r.cfg.deadLetters.DeadLetter(ctx, m, o.Reason()); err != nil {
			r.cfg.logger.ErrorContext(ctx, "awslambda: dead letter failed; record kept",
				slog.String("id", m.ID), slog.String("outcome", o.Kind.String()), slog.String("error", err.Error()))
			return true
		}
		r.cfg.logger.InfoContext(ctx, "awslambda: record dead-lettered",
			slog.String("id", m.ID), slog.String("reason", o.Reason()))
		return false
	}
	r.cfg.logger.InfoContext(ctx, "awslambda: record comes back",
		slog.String("id", m.ID), slog.String("outcome", o.Kind.String()), slog.String("retry_after", o.RetryAfter.String()))
	return true
}
