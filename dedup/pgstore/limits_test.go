package pgstore_test

import (
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
)

// A claim reads the response of the record it meets only when that record
// is COMPLETED (the duplicate's answer): a live PENDING or FAILED record
// that holds one (written by hand, or by another program) is answered
// without it, so that a large column is never read for a lost claim.
func TestClaimReadsResponseOnlyOfCompleted(t *testing.T) {
	p := pool(t)
	table := recordsTable(t, p)
	s := newStore(t, p, table)
	ctx := testCtx(t)
	t0 := time.Now().Truncate(time.Second)
	for _, status := range []dedup.Status{dedup.StatusPending, dedup.StatusFailed, dedup.StatusCompleted} {
		key := "k-" + string(status)
		c, err := s.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "a", Now: t0, LeaseUntil: t0.Add(time.Minute)})
		if err != nil || !c.Acquired {
			t.Fatalf("claim: %+v, %v", c, err)
		}
		// The row as another writer left it: the status, and a response.
		if _, err := p.Exec(ctx, "UPDATE "+table+" SET status = $1, response = $2", string(status), []byte("a large response")); err != nil {
			t.Fatal(err)
		}
		lost, err := s.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "b", Now: t0.Add(time.Second), LeaseUntil: t0.Add(time.Minute)})
		if err != nil || lost.Acquired || lost.Existing.Status != status {
			t.Fatalf("claim of a live %s record: %+v, %v", status, lost, err)
		}
		want := ""
		if status == dedup.StatusCompleted {
			want = "a large response"
		}
		if string(lost.Existing.Response) != want {
			t.Fatalf("claim of a live %s record read response %q, want %q", status, lost.Existing.Response, want)
		}
		if _, err := p.Exec(ctx, "DELETE FROM "+table); err != nil {
			t.Fatal(err)
		}
	}
}
