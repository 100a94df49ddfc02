package idempotency

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/hookset"
	"github.com/onceq/onceq/retry"
)

// Func is the operation Do runs at most once per key. Its response is
// stored and given to every repeat. It hands business writes to commit
// with the response over with tx.Write. An error stores nothing: the key
// is freed, and a repeat runs the function again.
type Func func(ctx context.Context, tx *Tx) ([]byte, error)

// Result is what Do gives back.
type Result struct {
	// Response is the function's response, or the one stored for the key.
	Response []byte
	// Replayed: the function did not run in this call; Response is the
	// stored answer of an earlier one.
	Replayed bool
	// Rejected: a business write's own condition refused the commit;
	// nothing was written, and Response is what the function gave
	// OnRejected (stored, and replayed to repeats).
	Rejected bool
}

// Runner runs functions at most once per key over a dedup.Store. It is
// safe for concurrent use.
type Runner struct {
	guard *consumer.Guard
	cfg   config
	hooks hooks
	// origin names the calls in spans and metrics: messaging system
	// "idempotency", destination the namespace ("process idempotency").
	origin consumer.Origin
}

// New returns a Runner over store. The Store is the same a consumer uses;
// give the Runner a Namespace of its own when they share a table.
func New(store dedup.Store, opts ...Option) (*Runner, error) {
	cfg := newConfig(opts)
	switch {
	case cfg.wait < 0:
		return nil, fmt.Errorf("idempotency: %w: Wait %v: must not be negative", consumer.ErrInvalidConfig, cfg.wait)
	case cfg.expiry <= 2*time.Second:
		return nil, fmt.Errorf("idempotency: %w: InProgressExpiry %v: must exceed 2s, the least margin a lease keeps over its function", consumer.ErrInvalidConfig, cfg.expiry)
	case cfg.storeRetry <= 0:
		return nil, fmt.Errorf("idempotency: %w: StoreRetryAfter %v: must be positive", consumer.ErrInvalidConfig, cfg.storeRetry)
	}
	r := &Runner{cfg: cfg, origin: consumer.Origin{System: "idempotency", Destination: cfg.namespace}}
	var guardHooks []consumer.Hook
	for _, h := range cfg.hooks {
		mine := hookset.Add(&r.hooks.replayed, h)
		mine = hookset.Add(&r.hooks.inProgress, h) || mine
		if !mine {
			guardHooks = append(guardHooks, h) // the Guard refuses what implements no hook at all
		}
	}
	gopts := []consumer.GuardOption{
		consumer.LeaseTTL(cfg.expiry), consumer.HandlerTimeout(cfg.functionTimeout()),
		consumer.Retention(cfg.retention), consumer.Namespace(cfg.namespace),
		// The caller decides whether to try again: a failed run frees the
		// key at once, and the Store never counts runs against it.
		consumer.FailedRetryDelay(time.Nanosecond), consumer.MaxAttempts(math.MaxInt32),
	}
	if cfg.cacheEntries > 0 {
		gopts = append(gopts, consumer.CompletedCache(cfg.cacheEntries, cfg.cacheBytes))
	} else {
		gopts = append(gopts, consumer.WithoutCompletedCache())
	}
	if cfg.skewSet {
		gopts = append(gopts, consumer.ClockSkewMargin(cfg.skew))
	}
	if cfg.payloadHash != nil {
		gopts = append(gopts, consumer.WithPayloadHash(cfg.payloadHash))
	}
	if len(guardHooks) > 0 {
		gopts = append(gopts, consumer.WithHooks(guardHooks...))
	}
	g, err := consumer.NewGuard(store, consumer.HandlerFunc(r.handle), append(gopts, cfg.guard...)...)
	if err != nil {
		return nil, fmt.Errorf("idempotency: %w", err)
	}
	r.guard = g
	return r, nil
}

// Check runs the Store's check (its table exists and can be read).
func (r *Runner) Check(ctx context.Context) error { return r.guard.Check(ctx) }

// Retention is how long a stored response is replayed (the Retention
// option): the expiry policy to publish to clients.
func (r *Runner) Retention() time.Duration { return r.cfg.retention }

// Tx is one run of a Do's function: what it hands over to commit with
// its response. Its methods may be called from any goroutine until the
// function returns.
type Tx struct {
	mu       sync.Mutex
	writes   []dedup.Write
	rejected []byte
	done     bool // the function returned: nothing more is taken
}

// call is one Do's state, reached by the Guard's handler through the
// context Do hands the Guard.
type call struct {
	fn  Func
	mu  sync.Mutex
	ran bool
}

type callKey struct{}

// Write hands business writes over, to commit in the same atomic
// operation as the function's COMPLETED record, of the Store's own write
// types (pgstore.Exec, dynamostore.Write, memstore.Write). Nothing is
// written when the function fails or its lease is lost. After the
// function returned (or on a nil Tx) it takes nothing and returns
// ErrNotInCall.
func (tx *Tx) Write(writes ...dedup.Write) error {
	if tx == nil {
		return ErrNotInCall
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.done {
		return ErrNotInCall
	}
	tx.writes = append(tx.writes, writes...)
	return nil
}

// OnRejected sets the response stored instead of the function's when a
// business write's own condition refuses the commit (out of stock, say):
// nothing is written, and repeats get this answer. After the function
// returned (or on a nil Tx) it takes nothing and returns ErrNotInCall.
func (tx *Tx) OnRejected(response []byte) error {
	if tx == nil {
		return ErrNotInCall
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.done {
		return ErrNotInCall
	}
	tx.rejected = response
	return nil
}

// handle is the Guard's handler: it runs the function of the call the
// context carries, with a Tx of its own (a run after a lost lease hands
// over afresh).
func (r *Runner) handle(ctx context.Context, _ *consumer.Message) (consumer.Result, error) {
	c := ctx.Value(callKey{}).(*call)
	tx := &Tx{}
	c.mu.Lock()
	c.ran = true
	c.mu.Unlock()
	resp, err := c.fn(ctx, tx)
	tx.mu.Lock()
	defer tx.mu.Unlock()
	tx.done = true
	if err != nil {
		return consumer.Result{}, err
	}
	return consumer.Result{Response: resp, Writes: tx.writes, RejectResponse: tx.rejected}, nil
}

// failedWait bounds the wait for a record an earlier run failed moments
// ago to become claimable (whole seconds in some Stores), which Do makes
// whether or not it waits for calls in progress: that call is over.
const failedWait = 3 * time.Second

// Do runs fn once for key: the first call with key claims it, runs fn
// under a renewed lease and stores fn's response with its writes; a
// repeat with the same payload gets that response, Replayed, without
// running fn. payload is what a repeat must match (its hash is stored):
// another payload under the key is ErrKeyReuse. A repeat while the first
// runs fails with an *InProgressError, or waits with the Wait option. A
// store outage is a *StoreError. fn's own error is returned as it is, and
// stores nothing.
func (r *Runner) Do(ctx context.Context, key string, payload []byte, fn Func) (Result, error) {
	if fn == nil {
		return Result{}, errors.New("idempotency: Do: a nil function")
	}
	var deadline time.Time
	if r.cfg.wait > 0 {
		deadline = time.Now().Add(r.cfg.wait)
	}
	poll := 10 * time.Millisecond
	var failedUntil time.Time
	for {
		c := &call{fn: fn}
		m := &consumer.Message{Body: payload, Attributes: map[string]string{consumer.IdempotencyKeyAttribute: key}, Deliveries: 1,
			Origin: r.origin}
		o := r.guard.Process(context.WithValue(ctx, callKey{}, c), m)
		c.mu.Lock()
		ran := c.ran
		c.mu.Unlock()
		var wait time.Duration
		switch o.Kind {
		case consumer.Processed:
			return Result{Response: o.Response}, nil
		case consumer.Rejected:
			return Result{Response: o.Response, Rejected: true}, nil
		case consumer.Duplicate:
			for _, h := range r.hooks.replayed {
				h.OnResponseReplayed(ctx, key, o.Response)
			}
			return Result{Response: o.Response, Replayed: true}, nil
		case consumer.StoreUnavailable:
			return Result{}, &StoreError{Class: storeClass(o.Err), RetryAfter: r.cfg.storeRetry, Err: o.Err}
		case consumer.Misconfigured:
			return Result{}, &StoreError{Class: retry.Misconfigured, RetryAfter: r.cfg.storeRetry, Err: o.Err}
		case consumer.LeaseLost:
			return Result{}, r.inProgress(m.IdempotencyKey, o.RetryAfter, o.Err)
		case consumer.InFlightElsewhere:
			for _, h := range r.hooks.inProgress {
				h.OnKeyInProgress(ctx, key, o.RetryAfter)
			}
			if deadline.IsZero() || !time.Now().Add(poll).Before(deadline) {
				return Result{}, r.inProgress(m.IdempotencyKey, o.RetryAfter, o.Err)
			}
			wait = poll
			poll = min(2*poll, 250*time.Millisecond)
		case consumer.Retrying:
			if ran || ctx.Err() != nil {
				return Result{}, o.Err // the function's own error, or the caller stopped
			}
			// An earlier run failed moments ago: its record can be taken
			// as soon as the Store allows (within whole seconds where it
			// keeps them), looked at again more and more slowly.
			if failedUntil.IsZero() {
				failedUntil = time.Now().Add(failedWait)
			}
			if time.Now().Add(poll).After(failedUntil) && (deadline.IsZero() || time.Now().Add(poll).After(deadline)) {
				return Result{}, r.inProgress(m.IdempotencyKey, o.RetryAfter, o.Err)
			}
			wait = min(poll, o.RetryAfter)
			poll = min(2*poll, 250*time.Millisecond)
		default: // KeyReuse, DeadLettered: the key, the payload or the function's permanent fault
			return Result{}, o.Err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Result{}, ctx.Err()
		case <-t.C:
		}
	}
}

// inProgressRetry is the longest wait an *InProgressError advises: the
// first call most often ends well before its lease could expire, so a
// repeat looks again soon rather than when a dead holder's lease would
// be free.
const inProgressRetry = time.Second

// inProgress is the error of a repeat that met stored, the key as stored,
// in progress, free at the latest after until.
func (r *Runner) inProgress(stored string, until time.Duration, err error) error {
	return &InProgressError{KeyHash: dedup.KeyHash(stored), RetryAfter: min(max(until, 100*time.Millisecond), inProgressRetry), Err: err}
}

// storeClass is an outage's class: Throttled or Transient.
func storeClass(err error) retry.Class {
	if c := retry.Classify(err); c == retry.Throttled {
		return c
	}
	return retry.Transient
}
