package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
)

// retries records what a RetryHook is told.
type retries struct {
	mu sync.Mutex
	by map[string]int // "class/code"
	n  int
}

func (r *retries) hook(_ context.Context, _ string, class retry.Class, code string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[string]int{}
	}
	r.by[class.String()+"/"+code]++
	r.n++
}

func (r *retries) count() (int, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]int, len(r.by))
	for k, v := range r.by {
		m[k] = v
	}
	return r.n, m
}

// faultRig is a store whose every call crosses a fault proxy in front of
// DynamoDB Local, and a direct store on the same table to set up and
// inspect state unhindered.
type faultRig struct {
	proxy   *faultproxy.Proxy
	st      *dynamostore.Store
	direct  *dynamostore.Store
	inv     *inventory
	retries *retries
}

// newFaultRig opens the rig; opts are added to the proxied store's.
func newFaultRig(t *testing.T, policy retry.Policy, opts ...dynamostore.Option) *faultRig {
	t.Helper()
	ep := testenv.DynamoDBEndpoint(t)
	direct := dynamoClient(t, ep, nil)
	table := recordsTable(t, direct)
	p := faultproxy.Start(t, ep, faultproxy.WithSeed(42))
	r := &retries{}
	return &faultRig{
		proxy:   p,
		st:      newStore(t, dynamoClient(t, p.URL(), nil), table, append([]dynamostore.Option{dynamostore.WithRetryPolicy(policy), dynamostore.WithHooks(onRetry(r.hook))}, opts...)...),
		direct:  newStore(t, direct, table),
		inv:     newInventory(t, direct),
		retries: r,
	}
}

func TestFaultThrottlesRetriedAndCounted(t *testing.T) {
	rig := newFaultRig(t, fastPolicy(8))
	at := clock()
	ctx := t.Context()
	k := uniqueKey(t)

	rig.proxy.AddRule(faultproxy.Rule{Op: "PutItem", Times: 3, Fault: faultproxy.Throttle})
	c, err := rig.st.Claim(ctx, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(30)})
	if err != nil || !c.Acquired || c.Lease.Version != 1 {
		t.Fatalf("throttled claim of a fresh key: %+v, %v (a throttle must never look like a duplicate)", c, err)
	}
	// One HTTP request per policy attempt: the SDK's retryer is off.
	if n := rig.proxy.Requests("PutItem"); n != 4 {
		t.Fatalf("proxy saw %d PutItems, want 4 (3 throttled + 1)", n)
	}
	if n, by := rig.retries.count(); n != 3 || by["throttled/ProvisionedThroughputExceededException"] != 3 {
		t.Fatalf("retries %v", by)
	}

	rig.proxy.ClearRules()
	rig.proxy.AddRule(faultproxy.Rule{Op: "UpdateItem", Times: 2, Fault: faultproxy.ThrottlingException})
	if err := rig.st.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Response: []byte("r"), Now: at(1), ExpiresAt: at(3600)}); err != nil {
		t.Fatalf("throttled complete: %v", err)
	}
	if _, by := rig.retries.count(); by["throttled/ThrottlingException"] != 2 {
		t.Fatalf("retries %v", by)
	}
	if rec, _ := rig.direct.Get(ctx, k); rec.Status != dedup.StatusCompleted || rec.Version != 2 {
		t.Fatalf("record %+v", rec)
	}

	// Throttled past the policy: an error of class Throttled, not a Claim.
	rig.proxy.ClearRules()
	rig.proxy.ResetStats()
	rig.proxy.AddRule(faultproxy.Rule{Fault: faultproxy.Throttle})
	// The rig's store has 8 attempts; one with 3 over the same proxy.
	st3 := newStore(t, dynamoClient(t, rig.proxy.URL(), nil), rig.st.Table(), dynamostore.WithRetryPolicy(fastPolicy(3)))
	c, err = st3.Claim(ctx, dedup.ClaimRequest{Key: uniqueKey(t), Owner: "a", Now: at(0), LeaseUntil: at(30)})
	if err == nil || retry.Classify(err) != retry.Throttled || c.Acquired || c.Existing.Status != "" {
		t.Fatalf("exhausted throttles: %+v, %v (class %v)", c, err, retry.Classify(err))
	}
	if n := rig.proxy.Requests("PutItem"); n != 3 {
		t.Fatalf("proxy saw %d requests for 3 attempts", n)
	}
}

func TestFaultConditionFailedNeverRetried(t *testing.T) {
	rig := newFaultRig(t, fastPolicy(8))
	at := clock()
	ctx := t.Context()
	k := uniqueKey(t)
	first := mustClaim(t, rig.direct, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(5)})

	rig.proxy.ResetStats()
	c, err := rig.st.Claim(ctx, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "b", Now: at(1), LeaseUntil: at(31)})
	if err != nil || c.Acquired || c.Existing.Owner != "a" {
		t.Fatalf("losing claim: %+v %v", c, err)
	}
	if n := rig.proxy.Requests(""); n != 1 {
		t.Fatalf("a condition failure took %d requests, want 1", n)
	}

	// Take over, then the old owner's fenced Complete and Fail: one request each.
	mustClaim(t, rig.direct, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "c", Now: at(6), LeaseUntil: at(60)})
	rig.proxy.ResetStats()
	if err := rig.st.Complete(ctx, dedup.CompleteRequest{Lease: first.Lease, Now: at(7), ExpiresAt: at(99)}); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("fenced complete: %v", err)
	}
	if err := rig.st.Fail(ctx, dedup.FailRequest{Lease: first.Lease, Now: at(7), RetryAt: at(9)}); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("fenced fail: %v", err)
	}
	sku := uniqueName("sku-")
	rig.inv.stock(t, sku, 10)
	if err := rig.st.Complete(ctx, dedup.CompleteRequest{Lease: first.Lease, Now: at(7), ExpiresAt: at(99), Writes: []dedup.Write{rig.inv.reserve(sku, 1)}}); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("fenced transactional complete: %v", err)
	}
	// A business condition: a decision too.
	l := mustClaim(t, rig.direct, dedup.ClaimRequest{Key: uniqueKey(t), Owner: "a", Now: at(0), LeaseUntil: at(30)}).Lease
	var be *dedup.BusinessConditionError
	if err := rig.st.Complete(ctx, dedup.CompleteRequest{Lease: l, Now: at(1), ExpiresAt: at(99), Writes: []dedup.Write{rig.inv.reserve(sku, 11)}}); !errors.As(err, &be) {
		t.Fatalf("short stock: %v", err)
	}
	if n := rig.proxy.Requests(""); n != 4 {
		t.Fatalf("4 decided calls took %d requests", n)
	}
	if n, by := rig.retries.count(); n != 0 {
		t.Fatalf("condition failures retried: %v", by)
	}
}

// A 500 on every Complete: the error reaches the caller (who leaves the
// message un-acked), nothing is committed, and the redelivery after the
// lease applies the effect exactly once.
func TestFault500DuringComplete(t *testing.T) {
	rig := newFaultRig(t, fastPolicy(3))
	at := clock()
	ctx := t.Context()
	k := uniqueKey(t)
	sku := uniqueName("sku-")
	rig.inv.stock(t, sku, 10)

	c := mustClaim(t, rig.st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(30)})
	rig.proxy.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Fault: faultproxy.InternalError})
	err := rig.st.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Response: []byte("r"), Now: at(1), ExpiresAt: at(3600), Writes: []dedup.Write{rig.inv.reserve(sku, 2)}})
	if err == nil || errors.Is(err, dedup.ErrLeaseLost) || retry.Classify(err) != retry.Transient {
		t.Fatalf("Complete under 500s: %v (class %v), want a transient error", err, retry.Classify(err))
	}
	if n := rig.proxy.Injected(faultproxy.InternalError); n != 3 {
		t.Fatalf("%d 500s injected, want 3 (the policy's attempts)", n)
	}
	if rec, _ := rig.direct.Get(ctx, k); rec.Status != dedup.StatusPending {
		t.Fatalf("record %+v after a failed Complete", rec)
	}
	if a, _ := rig.inv.levels(t, sku); a != 10 {
		t.Fatalf("stock %d after a failed Complete", a)
	}
	rig.proxy.ClearRules()

	// The un-acked message comes back: while the lease lives it is a
	// PENDING duplicate (not acked again), after it the new claim wins.
	if d := mustClaim(t, rig.st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "b", Now: at(10), LeaseUntil: at(40)}); d.Acquired || d.Existing.Status != dedup.StatusPending {
		t.Fatalf("redelivery within the lease: %+v", d)
	}
	b := mustClaim(t, rig.st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "b", Now: at(31), LeaseUntil: at(61)})
	if !b.Acquired || b.Attempt != 1 { // a lease abandoned is no failed run
		t.Fatalf("redelivery after the lease: %+v", b)
	}
	if err := rig.st.Complete(ctx, dedup.CompleteRequest{Lease: b.Lease, Response: []byte("r"), Now: at(32), ExpiresAt: at(3600), Writes: []dedup.Write{rig.inv.reserve(sku, 2)}}); err != nil {
		t.Fatal(err)
	}
	if err := rig.st.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Now: at(33), ExpiresAt: at(3600), Writes: []dedup.Write{rig.inv.reserve(sku, 2)}}); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("the first worker's late Complete: %v", err)
	}
	if a, r := rig.inv.levels(t, sku); a != 8 || r != 2 {
		t.Fatalf("stock %d/%d, want 8/2: the effect exactly once", a, r)
	}
}

// The answer is lost after DynamoDB committed (a 500 or a reset after
// forwarding): the store's retry meets its own write and reports success,
// and nothing is applied twice.
func TestFaultLostAnswerAfterCommit(t *testing.T) {
	rig := newFaultRig(t, fastPolicy(5))
	at := clock()
	ctx := t.Context()
	sku := uniqueName("sku-")
	rig.inv.stock(t, sku, 10)

	k := uniqueKey(t)
	rig.proxy.AddRule(faultproxy.Rule{Op: "PutItem", Nth: 1, Fault: faultproxy.Reset, After: true})
	c, err := rig.st.Claim(ctx, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(30)})
	if err != nil || !c.Acquired || c.Lease.Version != 1 || c.Attempt != 1 {
		t.Fatalf("claim whose answer was lost: %+v %v", c, err)
	}
	// The retried Put met our own record and knew it: no takeover Update.
	if p, u := rig.proxy.Requests("PutItem"), rig.proxy.Requests("UpdateItem"); p != 2 || u != 0 {
		t.Fatalf("claim whose answer was lost: %d PutItems and %d UpdateItems, want 2 and 0", p, u)
	}

	rig.proxy.ClearRules()
	rig.proxy.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Nth: 1, Fault: faultproxy.InternalError, After: true})
	if err := rig.st.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Response: []byte("r"), Now: at(1), ExpiresAt: at(3600), Writes: []dedup.Write{rig.inv.reserve(sku, 3)}}); err != nil {
		t.Fatalf("complete whose answer was lost: %v", err)
	}
	if a, r := rig.inv.levels(t, sku); a != 7 || r != 3 {
		t.Fatalf("stock %d/%d, want 7/3", a, r)
	}
	if n := rig.proxy.Requests("TransactWriteItems"); n != 2 {
		t.Fatalf("%d TransactWriteItems, want 2 (lost + recognised)", n)
	}

	rig.proxy.ClearRules()
	rig.proxy.ResetStats()
	rig.proxy.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Nth: 1, Fault: faultproxy.Reset, After: true})
	k2 := uniqueKey(t)
	got, err := rig.st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k2, PayloadHash: "h", Owner: "a", Response: []byte("r"), Now: at(0), ExpiresAt: at(3600), Writes: []dedup.Write{rig.inv.reserve(sku, 1)}})
	if err != nil || !got.Acquired {
		t.Fatalf("ClaimComplete whose answer was lost: %+v %v", got, err)
	}
	if a, _ := rig.inv.levels(t, sku); a != 6 || rig.proxy.Requests("TransactWriteItems") != 2 {
		t.Fatalf("stock %d, want 6, after %d requests (want 2)", a, rig.proxy.Requests("TransactWriteItems"))
	}

	rig.proxy.ClearRules()
	l := mustClaim(t, rig.st, dedup.ClaimRequest{Key: uniqueKey(t), Owner: "a", Now: at(0), LeaseUntil: at(30)}).Lease
	rig.proxy.AddRule(faultproxy.Rule{Op: "UpdateItem", Nth: 1, Fault: faultproxy.InternalError, After: true})
	if err := rig.st.Fail(ctx, dedup.FailRequest{Lease: l, Reason: "x", Now: at(1), RetryAt: at(5)}); err != nil {
		t.Fatalf("fail whose answer was lost: %v", err)
	}
	// A real takeover is still a lost lease, retry or not.
	rig.proxy.ClearRules()
	mustClaim(t, rig.direct, dedup.ClaimRequest{Key: l.Key, Owner: "z", Now: at(6), LeaseUntil: at(60)})
	rig.proxy.AddRule(faultproxy.Rule{Op: "UpdateItem", Nth: 1, Fault: faultproxy.InternalError})
	if err := rig.st.Complete(ctx, dedup.CompleteRequest{Lease: l, Now: at(7), ExpiresAt: at(99)}); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("retried Complete on a taken-over key: %v", err)
	}
}

func TestFaultResetAndLatencyRetried(t *testing.T) {
	rig := newFaultRig(t, fastPolicy(5))
	at := clock()
	k := uniqueKey(t)
	mustClaim(t, rig.direct, dedup.ClaimRequest{Key: k, Owner: "a", Now: at(0), LeaseUntil: at(30)})
	rig.proxy.AddRule(faultproxy.Rule{Op: "GetItem", Nth: 1, Fault: faultproxy.Reset})
	rig.proxy.AddRule(faultproxy.Rule{Op: "GetItem", Fault: faultproxy.Latency, Delay: 50 * time.Millisecond})
	start := time.Now()
	if rec, err := rig.st.Get(t.Context(), k); err != nil || rec.Owner != "a" {
		t.Fatalf("get across a reset: %+v %v", rec, err)
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("latency not applied")
	}
	if n, by := rig.retries.count(); n != 1 || by["transient/"] != 1 {
		t.Fatalf("retries %v", by)
	}
}

// Under a request-rate ceiling every throttle reaches the RetryHook and
// every claim ends acquired: none is lost, none is mistaken for a duplicate.
func TestFaultCapacityThrottlesAllCounted(t *testing.T) {
	// Attempts are bounded by time, not count: a worker competing for a
	// 30 req/s bucket can lose many draws in a row, and giving up is not
	// what this test is about.
	policy := retry.Policy{Initial: 5 * time.Millisecond, Max: 100 * time.Millisecond, MaxAttempts: 1000, MaxElapsed: time.Minute}
	rig := newFaultRig(t, policy)
	rig.proxy.SetCapacity(30) // low enough to be exceeded even on a loaded machine
	at := clock()
	const workers, each = 8, 20
	concurrently(t, workers, func(w int) error {
		for i := range each {
			k := fmt.Sprintf("cap#%s-%d-%d", uniqueName(""), w, i)
			c, err := rig.st.Claim(t.Context(), dedup.ClaimRequest{Key: k, Owner: "o", Now: at(0), LeaseUntil: at(30)})
			if err != nil {
				return err
			}
			if !c.Acquired {
				return fmt.Errorf("fresh key %s reported as held: %+v", k, c.Existing)
			}
		}
		return nil
	})
	over := rig.proxy.Stats().OverCapacity
	n, by := rig.retries.count()
	if over == 0 || n != over || by["throttled/ProvisionedThroughputExceededException"] != over {
		t.Fatalf("proxy throttled %d, hooks counted %v", over, by)
	}
	t.Logf("%d claims, %d throttles, all counted", workers*each, over)
}

// fastPolicy keeps retried tests quick.
func fastPolicy(attempts int) retry.Policy {
	return retry.Policy{Initial: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: attempts, MaxElapsed: 10 * time.Second}
}

// Cancellation reasons as DynamoDB sends them, parsed from the wire: a
// conflict or a throttle on any item is retried and counted with its reason;
// a size limit is permanent and not retried.
func TestFaultCancellationReasons(t *testing.T) {
	rig := newFaultRig(t, fastPolicy(5))
	at := clock()
	ctx := t.Context()
	sku := uniqueName("sku-")
	rig.inv.stock(t, sku, 10)
	complete := func() error {
		l := mustClaim(t, rig.direct, dedup.ClaimRequest{Key: uniqueKey(t), Owner: "a", Now: at(0), LeaseUntil: at(30)}).Lease
		return rig.st.Complete(ctx, dedup.CompleteRequest{Lease: l, Now: at(1), ExpiresAt: at(99), Writes: []dedup.Write{rig.inv.reserve(sku, 1)}})
	}
	rig.proxy.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Times: 1, Fault: faultproxy.Cancel, Reasons: []string{"None", "TransactionConflict"}})
	rig.proxy.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Times: 1, Fault: faultproxy.Cancel, Reasons: []string{"ThrottlingError", "None"}})
	if err := complete(); err != nil {
		t.Fatalf("complete across a conflict and a throttle: %v", err)
	}
	if _, by := rig.retries.count(); by["transient/TransactionConflict"] != 1 || by["throttled/ThrottlingError"] != 1 {
		t.Fatalf("retries %v", by)
	}
	rig.proxy.ClearRules()
	rig.proxy.ResetStats()
	rig.proxy.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Fault: faultproxy.Cancel, Reasons: []string{"None", "ItemCollectionSizeLimitExceeded"}})
	err := complete()
	var te *dynamostore.TransactionError
	if !errors.As(err, &te) || retry.Classify(err) != retry.Permanent || errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("size limit: %v", err)
	}
	if n := rig.proxy.Requests("TransactWriteItems"); n != 1 {
		t.Fatalf("a permanent cancellation was retried: %d requests", n)
	}
	if a, _ := rig.inv.levels(t, sku); a != 9 {
		t.Fatalf("stock %d, want 9", a)
	}
}
