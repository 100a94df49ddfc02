package storetest

import (
	"testing"

	"github.com/onceq/onceq/dedup"
)

// takeovers checks a claim's and a record's Takeovers: one more per claim
// that takes over an abandoned lease (an expired PENDING record), as
// Claim and as ClaimComplete; none for a claim that loses, none for the
// re-claim of a FAILED record, none after Complete, and a fresh count for
// an expired COMPLETED record taken over (a new message) and after a
// Fail that resets attempts. A refunded Fail keeps it.
func (s *suite) takeovers(t *testing.T, st dedup.Store) {
	k := key(t)
	claimN := func(owner string, now, until, attempt, want int) dedup.Lease {
		t.Helper()
		c := claim(t, st, k, owner, "h1", now, until)
		l := mustAcquire(t, c, attempt)
		if c.Takeovers != want {
			t.Fatalf("claim by %s at +%ds: Takeovers %d, want %d (previous %+v)", owner, now, c.Takeovers, want, c.Previous)
		}
		if r := get(t, st, k); r.Takeovers != want {
			t.Fatalf("record after the claim by %s at +%ds: Takeovers %d, want %d (%+v)", owner, now, r.Takeovers, want, r)
		}
		return l
	}
	fail := func(l dedup.Lease, now int, refund, reset bool) {
		t.Helper()
		err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: "x", Now: at(now), RetryAt: at(now + 1), RefundAttempt: refund, ResetAttempts: reset})
		if err != nil {
			t.Fatalf("fail at +%ds: %v", now, err)
		}
	}
	wantRecord := func(when string, takeovers int) {
		t.Helper()
		if r := get(t, st, k); r.Takeovers != takeovers {
			t.Fatalf("record %s: Takeovers %d, want %d (%+v)", when, r.Takeovers, takeovers, r)
		}
	}

	claimN("a", 0, 10, 1, 0)
	// Each holder dies: every takeover of the abandoned lease counts one.
	now := 11
	for i, owner := range []string{"b", "c", "d"} {
		mustLose(t, claim(t, st, k, "x", "h1", now-1, now+9), dedup.StatusPending) // still live: no count
		claimN(owner, now, now+9, 1, i+1)
		now += 10
	}
	// A failed run counts an attempt, not a takeover, and its re-claim is
	// no takeover; a takeover then still counts on from where it was.
	l := claimN("e", now, now+9, 1, 4) // d abandoned it
	fail(l, now+1, false, false)
	wantRecord("after a failed run", 4)
	now += 3
	l = claimN("f", now, now+9, 2, 4)
	fail(l, now+1, true, false) // refunded: the worker stopped
	wantRecord("after a refunded Fail", 4)
	now += 3
	claimN("g", now, now+9, 2, 4)
	now += 10
	l = claimN("h", now, now+9, 2, 5) // g abandoned it
	// Complete keeps the count its run needed.
	if err := complete(t, st, l, "r", now+1, now+4); err != nil {
		t.Fatalf("complete: %v", err)
	}
	wantRecord("after Complete", 5)
	// Past the COMPLETED record's retention: a new message.
	now += 5
	claimN("i", now, now+9, 1, 0)
	now += 10
	l = claimN("j", now, now+9, 1, 1) // i abandoned it
	// A dead letter resets attempts and takeovers: a redrive starts afresh.
	fail(l, now+1, false, true)
	wantRecord("after a Fail that resets attempts", 0)
	now += 3
	claimN("k", now, now+9, 1, 0)

	if !st.Capabilities().ClaimComplete {
		return
	}
	// ClaimComplete over an abandoned lease is a takeover too.
	now += 10
	c, err := st.ClaimComplete(ctx(t), dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h1", Owner: "l", Response: []byte("r"),
		Now: at(now), ExpiresAt: at(now + 3600)})
	if err != nil {
		t.Fatalf("ClaimComplete over an abandoned lease: %v", err)
	}
	mustAcquire(t, c, 1)
	if c.Takeovers != 1 {
		t.Fatalf("ClaimComplete over an abandoned lease: Takeovers %d, want 1", c.Takeovers)
	}
	if r := get(t, st, k); r.Status != dedup.StatusCompleted || r.Takeovers != 1 {
		t.Fatalf("record after ClaimComplete over an abandoned lease %+v, want COMPLETED with 1 takeover", r)
	}
}
