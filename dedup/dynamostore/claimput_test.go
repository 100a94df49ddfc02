package dynamostore_test

import (
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// A claim of an absent key is one PutItem of the whole record (no
// UpdateItem), as is one-round-trip mode, and its transactional form one
// TransactWriteItems; a claim that meets a live record is that one call
// too, and learns the record from it.
func TestClaimOfNewKeyIsOnePut(t *testing.T) {
	st, client, c := countedStore(t)
	inv := newInventory(t, client)
	inv.stock(t, "s", 10)
	at := clock()
	ctx := t.Context()

	k := uniqueKey(t)
	c.reset()
	cl := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(30)})
	if !cl.Acquired || cl.Lease.Version != 1 || cl.Attempt != 1 || cl.Previous != nil {
		t.Fatalf("claim of a new key: %+v", cl)
	}
	if p, n := c.get("PutItem"), c.total(); p != 1 || n != 1 {
		t.Fatalf("claim of a new key: %d PutItems in %d calls (%v), want 1 in 1", p, n, c.by)
	}
	rec, err := st.Get(ctx, k)
	if err != nil || rec.Status != dedup.StatusPending || rec.Version != 1 || rec.Attempts != 0 || rec.Owner != "a" ||
		rec.PayloadHash != "h" || !rec.ExpiresAt.Equal(at(30)) || !rec.CreatedAt.Equal(at(0)) {
		t.Fatalf("record of a new claim: %+v, %v", rec, err)
	}

	c.reset()
	lost := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h2", Owner: "b", Now: at(1), LeaseUntil: at(31)})
	if lost.Acquired || lost.Existing.Owner != "a" || lost.Existing.PayloadHash != "h" {
		t.Fatalf("claim of a live key: %+v", lost)
	}
	if p, n := c.get("PutItem"), c.total(); p != 1 || n != 1 {
		t.Fatalf("claim of a live key: %d PutItems in %d calls (%v), want 1 in 1", p, n, c.by)
	}

	k2 := uniqueKey(t)
	c.reset()
	one, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k2, PayloadHash: "h", Owner: "a", Response: []byte("r"), Now: at(0), ExpiresAt: at(3600)})
	if err != nil || !one.Acquired || one.Lease.Version != 1 || one.Attempt != 1 {
		t.Fatalf("ClaimComplete of a new key: %+v, %v", one, err)
	}
	if p, n := c.get("PutItem"), c.total(); p != 1 || n != 1 {
		t.Fatalf("ClaimComplete of a new key: %d PutItems in %d calls (%v), want 1 in 1", p, n, c.by)
	}
	if rec, err := st.Get(ctx, k2); err != nil || rec.Status != dedup.StatusCompleted || string(rec.Response) != "r" || rec.Version != 1 || rec.Attempts != 0 {
		t.Fatalf("record of ClaimComplete: %+v, %v", rec, err)
	}

	k3 := uniqueKey(t)
	c.reset()
	if got, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k3, PayloadHash: "h", Owner: "a", Now: at(0), ExpiresAt: at(3600), Writes: []dedup.Write{inv.reserve("s", 1)}}); err != nil || !got.Acquired {
		t.Fatalf("ClaimComplete with a write: %+v, %v", got, err)
	}
	if x, n := c.get("TransactWriteItems"), c.total(); x != 1 || n != 1 {
		t.Fatalf("ClaimComplete with a write: %d transactions in %d calls (%v), want 1 in 1", x, n, c.by)
	}
	if rec, err := st.Get(ctx, k3); err != nil || rec.Status != dedup.StatusCompleted || rec.Version != 1 || rec.Attempts != 0 || len(rec.Response) != 0 {
		t.Fatalf("record of ClaimComplete with a write: %+v, %v", rec, err)
	}
}

// A takeover of an expired record costs the Put that met it and the
// Update that takes it, and version and attempts count on from the old
// record: in each claim form.
func TestTakeoverIsPutThenUpdate(t *testing.T) {
	st, client, c := countedStore(t)
	inv := newInventory(t, client)
	inv.stock(t, "s", 10)
	at := clock()
	ctx := t.Context()
	k := uniqueKey(t)

	a := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(5)})
	c.reset()
	b := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "b", Now: at(6), LeaseUntil: at(60)})
	if !b.Acquired || b.Lease.Version != a.Lease.Version+1 || b.Attempt != 1 || b.Previous == nil || b.Previous.Owner != "a" {
		t.Fatalf("takeover: %+v", b)
	}
	if p, u, n := c.get("PutItem"), c.get("UpdateItem"), c.total(); p != 1 || u != 1 || n != 2 {
		t.Fatalf("takeover: %v, want 1 PutItem and 1 UpdateItem", c.by)
	}
	if err := st.Complete(ctx, dedup.CompleteRequest{Lease: b.Lease, Now: at(7), ExpiresAt: at(10)}); err != nil {
		t.Fatal(err)
	}

	// One round trip over the expired COMPLETED record: version 3 + 1.
	c.reset()
	cc, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: "c", Response: []byte("r"), Now: at(11), ExpiresAt: at(20)})
	if err != nil || !cc.Acquired || cc.Lease.Version != 4 || cc.Attempt != 1 || cc.Previous == nil || cc.Previous.Owner != "b" {
		t.Fatalf("one-round-trip takeover: %+v, %v", cc, err)
	}
	if p, u, n := c.get("PutItem"), c.get("UpdateItem"), c.total(); p != 1 || u != 1 || n != 2 {
		t.Fatalf("one-round-trip takeover: %v, want 1 PutItem and 1 UpdateItem", c.by)
	}

	// With a write: the transaction with the Put is cancelled on the
	// expired record, the one with the Update commits, the write once.
	c.reset()
	tw, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: "d", Now: at(21), ExpiresAt: at(3600), Writes: []dedup.Write{inv.reserve("s", 2)}})
	if err != nil || !tw.Acquired {
		t.Fatalf("transactional takeover: %+v, %v", tw, err)
	}
	if x, n := c.get("TransactWriteItems"), c.total(); x != 2 || n != 2 {
		t.Fatalf("transactional takeover: %v, want 2 TransactWriteItems", c.by)
	}
	rec, err := st.Get(ctx, k)
	if err != nil || rec.Owner != "d" || rec.Status != dedup.StatusCompleted || rec.Version != 5 || rec.Attempts != 0 {
		t.Fatalf("after the transactional takeover: %+v, %v (want version 5, attempts 0: past a COMPLETED record, a new message)", rec, err)
	}
	if avail, reserved := inv.levels(t, "s"); avail != 8 || reserved != 2 {
		t.Fatalf("stock %d/%d, want 8/2: the write once", avail, reserved)
	}
}

// The skew margin decides a takeover as before: a PENDING lease expired
// for less than the margin still holds the key (the Put's answer says so:
// one call), a FAILED record's retry delay ends on time (Put + Update).
func TestTakeoverSkewMarginArms(t *testing.T) {
	c := &calls{}
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), c)
	// The test's clock runs an hour ahead of DynamoDB's.
	st := newStore(t, client, recordsTable(t, client), dynamostore.WithoutClockCheck())
	at := clock()
	ctx := t.Context()
	const margin = 5 * time.Second

	k := uniqueKey(t)
	mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(10), SkewMargin: margin})
	c.reset()
	held := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "b", Now: at(12), LeaseUntil: at(40), SkewMargin: margin})
	if held.Acquired || held.Existing.Owner != "a" {
		t.Fatalf("a lease expired for less than the margin was taken: %+v", held)
	}
	if n := c.total(); n != 1 {
		t.Fatalf("a claim of a key held within the margin: %v, want the Put alone", c.by)
	}
	took := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "b", Now: at(16), LeaseUntil: at(40), SkewMargin: margin})
	if !took.Acquired || took.Lease.Version != 2 {
		t.Fatalf("a lease expired for longer than the margin: %+v", took)
	}
	if err := st.Fail(ctx, dedup.FailRequest{Lease: took.Lease, Reason: "x", Now: at(17), RetryAt: at(20)}); err != nil {
		t.Fatal(err)
	}
	c.reset()
	again := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "c", Now: at(21), LeaseUntil: at(50), SkewMargin: margin})
	if !again.Acquired || again.Lease.Version != 4 || again.Previous == nil || again.Previous.Status != dedup.StatusFailed {
		t.Fatalf("a FAILED record past its retry delay, within the margin: %+v", again)
	}
	if p, u := c.get("PutItem"), c.get("UpdateItem"); p != 1 || u != 1 {
		t.Fatalf("takeover of a FAILED record: %v, want 1 PutItem and 1 UpdateItem", c.by)
	}
}

// A Put whose answer was lost after it committed is retried; the retry
// meets our own record and knows it as ours, in each claim form, with no
// takeover Update.
func TestRetriedPutRecognised(t *testing.T) {
	rig := newFaultRig(t, fastPolicy(5))
	at := clock()
	ctx := t.Context()

	for _, fault := range []faultproxy.Fault{faultproxy.Reset, faultproxy.InternalError} {
		rig.proxy.ClearRules()
		rig.proxy.ResetStats()
		rig.proxy.AddRule(faultproxy.Rule{Op: "PutItem", Nth: 1, Fault: fault, After: true})
		k := uniqueKey(t)
		c, err := rig.st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: "a", Response: []byte("r"), Now: at(0), ExpiresAt: at(3600)})
		if err != nil || !c.Acquired || c.Lease.Version != 1 || c.Attempt != 1 {
			t.Fatalf("ClaimComplete whose answer was lost (%v): %+v %v", fault, c, err)
		}
		if p, u := rig.proxy.Requests("PutItem"), rig.proxy.Requests("UpdateItem"); p != 2 || u != 0 {
			t.Fatalf("ClaimComplete whose answer was lost (%v): %d PutItems, %d UpdateItems; want 2 and 0", fault, p, u)
		}
		// Another owner's claim is still a duplicate.
		d := mustClaim(t, rig.st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "b", Now: at(1), LeaseUntil: at(30)})
		if d.Acquired || d.Existing.Owner != "a" || string(d.Existing.Response) != "r" {
			t.Fatalf("duplicate after a recognised retry: %+v", d)
		}
	}
}
