package pgstore_test

import (
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
)

// A claim whose statement snapshot saw an expired lease, while the holder
// was renewing it (its UPDATE not yet committed), loses once the renewal
// commits, and learns the renewed record, not the stale one it saw.
func TestClaimLearnsRecordChangedAfterItsSnapshot(t *testing.T) {
	p := pool(t)
	table := recordsTable(t, p)
	s := newStore(t, p, table)
	ctx := testCtx(t)
	t0 := time.Now().Truncate(time.Second)
	a, err := s.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: "a", Now: t0, LeaseUntil: t0.Add(10 * time.Second)})
	if err != nil || !a.Acquired {
		t.Fatalf("claim by a: %+v, %v", a, err)
	}
	// The holder's renewal, held open: its row lock makes the claim wait.
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	renewed := t0.Add(time.Minute)
	if _, err := tx.Exec(ctx, "UPDATE "+table+" SET expires_at = $1", renewed); err != nil {
		t.Fatal(err)
	}
	type result struct {
		c   dedup.Claim
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := s.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: "b", Now: t0.Add(11 * time.Second), LeaseUntil: t0.Add(41 * time.Second)})
		done <- result{c, err}
	}()
	// Wait until the claim waits on the renewal's lock: its snapshot is
	// taken, and shows the lease expired.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := p.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%"+table+"%'").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim never waited on the renewal's lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.c.Acquired {
		t.Fatalf("claim over a renewed lease: %+v, %v; want it lost", r.c, r.err)
	}
	if r.c.Existing.Owner != "a" || !r.c.Existing.ExpiresAt.Equal(renewed) {
		t.Fatalf("the loser learned %+v; want a's lease renewed to %v, not the expired record of its snapshot", r.c.Existing, renewed)
	}
}
