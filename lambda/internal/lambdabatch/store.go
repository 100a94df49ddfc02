package lambdabatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup"
)

// limitsKey carries an invocation's limits in the context the Guard hands
// to the store; they survive the Guard's context.WithoutCancel.
type limitsKey struct{}

// limits are what an invocation's deadline imposes on its store calls.
type limits struct {
	leaseCap time.Time // no lease taken ends later
	callsEnd time.Time // every store call in flight is cancelled then
}

func withLimits(ctx context.Context, l limits) context.Context {
	return context.WithValue(ctx, limitsKey{}, l)
}

func leaseCap(ctx context.Context) (time.Time, bool) {
	l, ok := ctx.Value(limitsKey{}).(limits)
	return l.leaseCap, ok
}

// outOfTime makes the error of a call on a lease that the invocation's
// deadline cut off a dedup.ErrLeaseLost: the invocation can make no call
// under that lease any more, so the Guard must not retry the call (it
// would outlive the invocation) but report the record, whose next
// delivery finds what the store did.
func outOfTime(ctx context.Context, err error) error {
	l, ok := ctx.Value(limitsKey{}).(limits)
	if err == nil || !ok || time.Now().Before(l.callsEnd) {
		return err
	}
	return fmt.Errorf("lambda: %w: the invocation's deadline came before the store answered: %w", dedup.ErrLeaseLost, err)
}

// bounded ends ctx when the invocation's store calls must end, so that a
// stalled store cannot keep the function from answering.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if l, ok := ctx.Value(limitsKey{}).(limits); ok {
		return context.WithDeadline(ctx, l.callsEnd)
	}
	return ctx, func() {}
}

// cappedStore caps every lease at the deadline of the invocation that took
// it. The cap comes with the claim's context; renewals (which the Guard
// makes on a context of its own) find it by the lease's owner token. It
// reports every call to watch.
type cappedStore struct {
	dedup.Store
	watch *storeWatch
	mu    sync.Mutex
	caps  map[string]time.Time // lease owner → cap
}

// capLeases wraps s; it declares s's Capabilities (by embedding).
func capLeases(s dedup.Store, watch *storeWatch) *cappedStore {
	return &cappedStore{Store: s, watch: watch, caps: make(map[string]time.Time)}
}

// Check is the Store's, watched: a store that does not answer the first
// invocation's check is said while the check waits.
func (s *cappedStore) Check(ctx context.Context) error {
	return watchedErr(ctx, s, "Check", s.Store.Check)
}

// watched makes call, op, reporting it to the watch.
func watched[T any](ctx context.Context, s *cappedStore, op string, call func(ctx context.Context) (T, error)) (T, error) {
	c := s.watch.begin(op)
	v, err := call(ctx)
	s.watch.end(ctx, c, err)
	return v, err
}

// watchedErr is watched for a call that returns only an error.
func watchedErr(ctx context.Context, s *cappedStore, op string, call func(ctx context.Context) error) error {
	_, err := watched(ctx, s, op, func(ctx context.Context) (struct{}, error) { return struct{}{}, call(ctx) })
	return err
}

func (s *cappedStore) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	limit, capped := leaseCap(ctx)
	if capped && req.LeaseUntil.After(limit) {
		req.LeaseUntil = limit
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	c, err := watched(ctx, s, "Claim", func(ctx context.Context) (dedup.Claim, error) { return s.Store.Claim(ctx, req) })
	if err == nil && c.Acquired && capped {
		s.mu.Lock()
		s.caps[c.Lease.Owner] = limit
		s.mu.Unlock()
	}
	return c, err
}

func (s *cappedStore) Extend(ctx context.Context, req dedup.ExtendRequest) error {
	s.mu.Lock()
	limit, capped := s.caps[req.Lease.Owner]
	s.mu.Unlock()
	if capped && req.LeaseUntil.After(limit) {
		req.LeaseUntil = limit
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	return outOfTime(ctx, watchedErr(ctx, s, "Extend", func(ctx context.Context) error { return s.Store.Extend(ctx, req) }))
}

func (s *cappedStore) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	err := outOfTime(ctx, watchedErr(ctx, s, "Complete", func(ctx context.Context) error { return s.Store.Complete(ctx, req) }))
	s.forget(req.Lease.Owner)
	return err
}

func (s *cappedStore) Fail(ctx context.Context, req dedup.FailRequest) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	err := outOfTime(ctx, watchedErr(ctx, s, "Fail", func(ctx context.Context) error { return s.Store.Fail(ctx, req) }))
	s.forget(req.Lease.Owner)
	return err
}

func (s *cappedStore) Get(ctx context.Context, key string) (dedup.Record, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	return watched(ctx, s, "Get", func(ctx context.Context) (dedup.Record, error) { return s.Store.Get(ctx, key) })
}

func (s *cappedStore) forget(owner string) {
	s.mu.Lock()
	delete(s.caps, owner)
	s.mu.Unlock()
}

// sweep drops the caps of leases whose invocation has ended (their holder
// was stopped before it completed or failed them).
func (s *cappedStore) sweep(now time.Time) {
	s.mu.Lock()
	for owner, limit := range s.caps {
		if now.After(limit) {
			delete(s.caps, owner)
		}
	}
	s.mu.Unlock()
}

// ClaimComplete writes COMPLETED at once: no lease, nothing to cap.
func (s *cappedStore) ClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	return watched(ctx, s, "ClaimComplete", func(ctx context.Context) (dedup.Claim, error) { return s.Store.ClaimComplete(ctx, req) })
}
