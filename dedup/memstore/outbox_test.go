package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/outbox"
)

// Sweep forgets the dispatched and dead entries past their retention,
// never a Pending one; a lane's Seq goes on rising while any of its
// entries is kept.
func TestSweepForgetsDoneEntries(t *testing.T) {
	s := memstoretest.New(t)
	ctx := context.Background()
	now := time.Now()
	send := func(key string, at time.Time, n int) {
		t.Helper()
		c, err := s.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "w", Now: at, LeaseUntil: at.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{Destination: "q", OrderingKey: "lane"}
		}
		if err := s.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Now: at, ExpiresAt: at.Add(time.Hour), Outbox: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	send("k1", now, 3)
	ob := s.Outbox()
	es, err := ob.Lease(ctx, outbox.LeaseRequest{Owner: "r", Now: now, LeaseUntil: now.Add(time.Minute), Max: 2})
	if err != nil || len(es) != 2 {
		t.Fatalf("Lease: %+v, %v", es, err)
	}
	if err := ob.Dispatched(ctx, []outbox.Lease{es[0].Lease}, now, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := ob.Dead(ctx, es[1].Lease, "refused", now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	s.Sweep(now.Add(time.Minute))
	left, _ := ob.Entries(ctx, "", 0)
	if len(left) != 2 || left[0].State != outbox.Dead || left[1].State != outbox.Pending {
		t.Fatalf("entries after the sweep %+v, want the dead one and the pending one", left)
	}
	send("k2", now.Add(time.Second), 1)
	all, _ := ob.Entries(ctx, "", 0)
	if last := all[len(all)-1]; last.Seq <= left[1].Seq {
		t.Fatalf("Seq %d after a sweep, the lane's last was %d: want it rising", last.Seq, left[1].Seq)
	}
}

// Entries of one lane marked dispatched out of their order (a relay's
// mark of an entry behind one another relay took over once its lease ran
// out) and in order leave the lane leasable: its entries not dispatched
// are leased again in order, and nothing dispatched is leased again nor
// blocks the lane's next entry.
func TestDispatchedOutOfLaneOrder(t *testing.T) {
	s := memstoretest.New(t)
	ctx := context.Background()
	now := time.Now()
	commit := func(key string, n int) {
		t.Helper()
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{Destination: "q", OrderingKey: "lane"}
		}
		if _, err := s.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: key, Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour), Outbox: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	lease := func(owner string, at time.Time, max int) []outbox.Entry {
		t.Helper()
		es, err := s.Outbox().Lease(ctx, outbox.LeaseRequest{Owner: owner, Now: at, LeaseUntil: at.Add(time.Minute), Max: max})
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	dispatched := func(at time.Time, es ...outbox.Entry) {
		t.Helper()
		ls := make([]outbox.Lease, len(es))
		for i, e := range es {
			ls[i] = e.Lease
		}
		if err := s.Outbox().Dispatched(ctx, ls, at, at.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	commit("k1", 3)
	first := lease("r1", now, 3)
	if len(first) != 3 {
		t.Fatalf("r1 leased %d entries, want 3", len(first))
	}
	later := now.Add(2 * time.Minute) // r1's leases ran out
	taken := lease("r2", later, 1)
	if len(taken) != 1 || taken[0].ID != first[0].ID {
		t.Fatalf("r2 leased %+v, want the lane's first entry", taken)
	}
	dispatched(later, first[2]) // behind the entry r2 holds
	if err := s.Outbox().Retry(ctx, taken[0].Lease, "unavailable", later, later); err != nil {
		t.Fatal(err)
	}
	again := lease("r3", later.Add(2*time.Minute), 10)
	if len(again) != 2 || again[0].ID != first[0].ID || again[1].ID != first[1].ID {
		t.Fatalf("r3 leased %+v, want the lane's two entries not dispatched, in order", again)
	}
	dispatched(later.Add(2*time.Minute), again...)
	if es := lease("r3", later.Add(4*time.Minute), 10); len(es) != 0 {
		t.Fatalf("leased %d dispatched entries again", len(es))
	}
	commit("k2", 2)
	next := lease("r3", later.Add(4*time.Minute), 10)
	if len(next) != 2 || next[0].ID != outbox.ID("k2", 0) || next[1].ID != outbox.ID("k2", 1) {
		t.Fatalf("leased %+v after the lane's dispatched entries, want k2's two in order", next)
	}
	dispatched(later.Add(4*time.Minute), next...)
	if es, _ := s.Outbox().Entries(ctx, outbox.Pending, 0); len(es) != 0 {
		t.Fatalf("%d entries still pending, want none", len(es))
	}
}
