package storetest

import (
	"errors"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/outbox"
)

// implementation is st as a T (dedup.Inspector, dedup.Forgetter, ...),
// found through the wrappers the suite puts around a Store and any with
// an Unwrap method.
func implementation[T any](st dedup.Store) (T, bool) {
	for st != nil {
		if s, ok := st.(T); ok {
			return s, true
		}
		switch s := st.(type) {
		case Wrapped:
			st = s.Store
		case interface{ Unwrap() dedup.Store }:
			st = s.Unwrap()
		default:
			st = nil
		}
	}
	var none T
	return none, false
}

// inspectLimit bounds the suite's reads: enough for its own records and
// any other case's in a shared table.
const inspectLimit = 100000

// inspector: every Store implements dedup.Inspector, which an operator's
// tool reads it through: a record is found by its key hash, a listing by
// status holds the records of that status and no other, and the outbox
// entries a commit kept are listed (a Store without an outbox says so
// with dedup.ErrNoOutbox). Records are told apart by owner, as a store
// may keep no key.
func (s *suite) inspector(t *testing.T, st dedup.Store) {
	in, ok := implementation[dedup.Inspector](st)
	if !ok {
		t.Fatalf("the Store (%T) is no dedup.Inspector", st)
	}
	dead, done := key(t), key(t)
	deadOwner, doneOwner := "dead-"+dedup.KeyHash(dead), "done-"+dedup.KeyHash(done)
	l := mustAcquire(t, claim(t, st, dead, deadOwner, "h1", 0, 30), 1)
	if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: "refused for good", Now: at(1), RetryAt: at(3600), DeadLetter: true, ResetAttempts: true}); err != nil {
		t.Fatal(err)
	}
	l = mustAcquire(t, claim(t, st, done, doneOwner, "h1", 0, 30), 1)
	if err := complete(t, st, l, "ok", 1, 3600); err != nil {
		t.Fatal(err)
	}

	res, err := in.FindKeyHash(ctx(t), dedup.KeyHash(dead), inspectLimit)
	if err != nil {
		t.Fatalf("FindKeyHash: %v", err)
	}
	if n := owned(res.Records, deadOwner); n != 1 || res.Scanned < 2 || res.Unit == "" {
		t.Fatalf("FindKeyHash of the key's hash: %d records of its owner in %+v, want 1 (and what was read counted, with its unit)", n, res)
	}
	for _, r := range res.Records {
		if r.Key != "" && dedup.KeyHash(r.Key) != dedup.KeyHash(dead) {
			t.Fatalf("FindKeyHash %s found the record of key_hash %s", dedup.KeyHash(dead), dedup.KeyHash(r.Key))
		}
	}

	recs, err := in.List(ctx(t), dedup.ListFilter{Status: dedup.StatusDeadLetter, Limit: inspectLimit})
	if err != nil {
		t.Fatalf("List by status: %v", err)
	}
	if owned(recs, deadOwner) != 1 || owned(recs, doneOwner) != 0 {
		t.Fatalf("List of DEAD_LETTER: %d records of the dead letter's owner and %d of the completed one's, want 1 and 0", owned(recs, deadOwner), owned(recs, doneOwner))
	}
	for _, r := range recs {
		if r.Status != dedup.StatusDeadLetter {
			t.Fatalf("List of DEAD_LETTER returned a %s record", r.Status)
		}
	}
	if _, err := in.List(ctx(t), dedup.ListFilter{Status: dedup.StatusDeadLetter}); err == nil {
		t.Fatal("List with no Limit: no error")
	}

	if !st.Capabilities().Outbox {
		if _, err := in.OutboxEntries(ctx(t), outbox.Pending, 10); !errors.Is(err, dedup.ErrNoOutbox) {
			t.Fatalf("OutboxEntries of a Store without an outbox: %v, want dedup.ErrNoOutbox", err)
		}
		return
	}
	dest := destination(t)
	send(t, st, 10, msg(dest, "", "one"))
	es, err := in.OutboxEntries(ctx(t), outbox.Pending, inspectLimit)
	if err != nil {
		t.Fatalf("OutboxEntries: %v", err)
	}
	n := 0
	for _, e := range es {
		if e.Destination == dest && string(e.Body) == "one" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("OutboxEntries of PENDING: %d entries of the one committed, want 1", n)
	}
}

// owned counts the records of owner.
func owned(recs []dedup.Record, owner string) int {
	n := 0
	for _, r := range recs {
		if r.Owner == owner {
			n++
		}
	}
	return n
}
