package storetest

import (
	"errors"
	"testing"

	"github.com/onceq/onceq/dedup"
)

// reset: every Store hands over a dedup.Resetter in its Capabilities. A record that failed for
// good (FAILED, DEAD_LETTER) or whose lease was abandoned is reset, once
// per reading, to a FAILED record claimable at once with a full budget;
// a COMPLETED record, a live lease, an absent key and a stale version are
// refused with dedup.ErrRecordChanged and left as they were.
func (s *suite) reset(t *testing.T, st dedup.Store) {
	rs := st.Capabilities().Resetter
	if rs == nil {
		t.Fatalf("the Store (%T) gives no dedup.Resetter in its Capabilities", st)
	}
	reset := func(k string, version int64, now int) error {
		t.Helper()
		return rs.Reset(ctx(t), dedup.ResetRequest{Key: k, Version: version, Reason: "redriven by an operator", Now: at(now)})
	}
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, dedup.ErrRecordChanged) {
			t.Fatalf("Reset of %s: %v, want dedup.ErrRecordChanged", what, err)
		}
	}

	// A dead letter that used its attempts and took over leases.
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 5), 1)
	if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: "x", Now: at(1), RetryAt: at(2)}); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, claim(t, st, k, "b", "h1", 3, 5), 2)
	l = mustAcquire(t, claim(t, st, k, "c", "h1", 10, 40), 2) // took b's abandoned lease
	if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: "poison", Now: at(11), RetryAt: at(3600), DeadLetter: true}); err != nil {
		t.Fatal(err)
	}
	dead := get(t, st, k)
	if dead.Status != dedup.StatusDeadLetter || dead.Attempts == 0 || dead.Takeovers == 0 {
		t.Fatalf("record before the reset %+v, want DEAD_LETTER with attempts and takeovers counted", dead)
	}
	refused("a stale version", reset(k, dead.Version-1, 12))
	if err := reset(k, dead.Version, 12); err != nil {
		t.Fatalf("Reset of a DEAD_LETTER record: %v", err)
	}
	r := get(t, st, k)
	if r.Status != dedup.StatusFailed || r.Version != dead.Version+1 || r.Attempts != 0 || r.Takeovers != 0 || r.LastError != "redriven by an operator" || r.ExpiresAt.After(at(12)) {
		t.Fatalf("record after Reset %+v, want FAILED one version on, counts afresh, the reason kept, expiring by +12s", r)
	}
	refused("the same reading twice", reset(k, dead.Version, 12))
	c := claim(t, st, k, "d", "h1", 14, 40)
	mustAcquire(t, c, 1)
	if c.Takeovers != 0 {
		t.Fatalf("claim after Reset: takeovers %d, want 0", c.Takeovers)
	}

	// A live lease is refused; once abandoned it is reset.
	live := get(t, st, k)
	refused("a live lease", reset(k, live.Version, 20))
	if err := reset(k, live.Version, 45); err != nil {
		t.Fatalf("Reset of an abandoned lease: %v", err)
	}
	if r := get(t, st, k); r.Status != dedup.StatusFailed || r.Version != live.Version+1 {
		t.Fatalf("abandoned lease after Reset %+v, want FAILED one version on", r)
	}

	// A COMPLETED record, live or past its retention, is never reset.
	done := key(t)
	l = mustAcquire(t, claim(t, st, done, "a", "h1", 0, 30), 1)
	if err := complete(t, st, l, "ok", 1, 100); err != nil {
		t.Fatal(err)
	}
	before := get(t, st, done)
	refused("a COMPLETED record", reset(done, before.Version, 2))
	refused("a COMPLETED record past its retention", reset(done, before.Version, 200))
	if after := get(t, st, done); after.Status != dedup.StatusCompleted || after.Version != before.Version {
		t.Fatalf("COMPLETED record after a refused Reset %+v, want it as it was (%+v)", after, before)
	}
	refused("an absent key", reset(key(t), 1, 2))
}
