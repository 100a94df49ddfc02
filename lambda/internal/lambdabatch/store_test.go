package lambdabatch

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// A lease taken in an invocation, and its renewals, end no later than the
// invocation's deadline, whatever LeaseTTL says.
func TestLeaseCappedAtDeadline(t *testing.T) {
	mem := memstoretest.New(t)
	s := capLeases(mem, newStoreWatch(mem, "lambdabatch", slog.Default()))
	now := time.Now()
	limit := now.Add(3 * time.Second).Truncate(time.Second)
	ctx := withLimits(context.Background(), limits{leaseCap: limit, callsEnd: limit})
	c, err := s.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: "o1", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !c.Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	r, _ := mem.Get(context.Background(), "k")
	if r.ExpiresAt.After(limit) {
		t.Fatalf("lease until %v, want at most the deadline %v", r.ExpiresAt, limit)
	}
	// A renewal on a context of its own (as the Guard's heartbeat does).
	if err := s.Extend(context.Background(), dedup.ExtendRequest{Lease: c.Lease, Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	r, _ = mem.Get(context.Background(), "k")
	if r.ExpiresAt.After(limit) {
		t.Fatalf("renewed until %v, want at most the deadline %v", r.ExpiresAt, limit)
	}
	if !s.Capabilities().ClaimComplete {
		t.Error("the wrapper must declare its store's ClaimComplete (OneRoundTrip)")
	}
}
