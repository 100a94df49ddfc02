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
