package awslambda

import (
	"context"
	"github.com/onceq/onceq/broker"
	"log/slog"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup"
)

// leaseCapKey carries an invocation's lease cap in the context the Guard
// hands to Store.Claim.
type leaseCapKey struct{}

func withLeaseCap(ctx context.Context, until time.Time) context.Context {
	return context.WithValue(ctx, leaseCapKey{}, until)
}

func leaseCap(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(leaseCapKey{}).(time.Time)
	return t, ok
}

// cappedStore caps every lease at the deadline of the invocation that took
// it. The cap comes with the claim's context; renewals (which the Guard
// makes on a context of its own) find it by the lease's owner token.
type cappedStore struct {
	dedup.Store
	mu   sync.Mutex
	caps map[string]time.Time // lease owner → cap
}

// capLeases wraps s; the result is a dedup.ClaimCompleter when s is one.
func capLeases(s dedup.Store) dedup.Store {
	c := &cappedStore{Store: s, caps: make(map[string]time.Time)}
	if cc, ok := s.(dedup.ClaimCompleter); ok {
		return &cappedClaimCompleter{cappedStore: c, cc: cc}
	}
	return c
}

// InheritLogger passes the Guard's logger on to the store it wraps.
func (s *cappedStore) InheritLogger(l *slog.Logger) {
	if li, ok := s.Store.(broker.LoggerInheritor); ok {
		li.InheritLogger(l)
	}
}

func (s *cappedStore) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	limit, capped := leaseCap(ctx)
	if capped && req.LeaseUntil.After(limit) {
		req.LeaseUntil = limit
	}
	c, err := s.Store.Claim(ctx, req)
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
	return s.Store.Extend(ctx, req)
}

func (s *cappedStore) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	err := s.Store.Complete(ctx, req)
	s.forget(req.Lease.Owner)
	return err
}

func (s *cappedStore) Fail(ctx context.Context, req dedup.FailRequest) error {
	err := s.Store.Fail(ctx, req)
	s.forget(req.Lease.Owner)
	return err
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

type cappedClaimCompleter struct {
	*cappedStore
	cc dedup.ClaimCompleter
}

// ClaimComplete writes COMPLETED at once: no lease, nothing to cap.
func (s *cappedClaimCompleter) ClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	return s.cc.ClaimComplete(ctx, req)
}

// sweeper is what both wrappers offer for sweeping.
func sweeperOf(s dedup.Store) *cappedStore {
	switch c := s.(type) {
	case *cappedStore:
		return c
	case *cappedClaimCompleter:
		return c.cappedStore
	}
	return nil
}
