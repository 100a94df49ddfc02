package storetest

import (
	"errors"
	"testing"

	"github.com/onceq/onceq/dedup"
)

// forget: every Store hands over a dedup.Forgetter in its Capabilities,
// which an operator's tool
// deletes a record through. A record is deleted only at the version the
// operator saw: one moved on since is kept (ErrRecordChanged), an absent
// one is ErrNotFound; a forgotten key is claimed afresh, as a new
// message, and the other records stay.
func (s *suite) forget(t *testing.T, st dedup.Store) {
	f := st.Capabilities().Forgetter
	if f == nil {
		t.Fatalf("the Store (%T) gives no dedup.Forgetter in its Capabilities", st)
	}
	gone, kept := key(t), key(t)
	l := mustAcquire(t, claim(t, st, gone, "w1", "h1", 0, 30), 1)
	if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: "bug", Now: at(1), RetryAt: at(3600), DeadLetter: true}); err != nil {
		t.Fatal(err)
	}
	lk := mustAcquire(t, claim(t, st, kept, "w1", "h1", 0, 30), 1)
	if err := complete(t, st, lk, "ok", 1, 3600); err != nil {
		t.Fatal(err)
	}
	dead := get(t, st, gone)

	if err := f.Forget(ctx(t), gone, dead.Version-1); !errors.Is(err, dedup.ErrRecordChanged) {
		t.Fatalf("Forget at an older version: %v, want ErrRecordChanged", err)
	}
	if r := get(t, st, gone); r.Version != dead.Version || r.Status != dedup.StatusDeadLetter {
		t.Fatalf("a refused Forget changed the record: %+v, was %+v", r, dead)
	}
	if err := f.Forget(ctx(t), gone, dead.Version); err != nil {
		t.Fatalf("Forget at the version read: %v", err)
	}
	if _, err := st.Get(ctx(t), gone); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("Get of a forgotten key: %v, want ErrNotFound", err)
	}
	if err := f.Forget(ctx(t), gone, dead.Version); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("Forget of an absent key: %v, want ErrNotFound", err)
	}
	if r := get(t, st, kept); r.Status != dedup.StatusCompleted || string(r.Response) != "ok" {
		t.Fatalf("Forget of one key touched another: %+v", r)
	}
	// The dead letter's retry delay is gone with it: the key runs again
	// at once, as a new message.
	mustAcquire(t, claim(t, st, gone, "w2", "h1", 2, 30), 1)
}
