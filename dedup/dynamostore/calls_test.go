package dynamostore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

func TestCallsPerMessage(t *testing.T) {
	calls := &calls{}
	c := dynamoClient(t, testenv.DynamoDBEndpoint(t), calls)
	st := newStore(t, c, recordsTable(t, c))
	ctx := context.Background()
	now := time.Now()

	calls.reset()
	cl, err := st.Claim(ctx, dedup.ClaimRequest{Key: "ns#new", PayloadHash: "h", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !cl.Acquired {
		t.Fatal(cl, err)
	}
	if err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Response: []byte("r"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if n := calls.take(); n != 2 {
		t.Fatalf("a new message took %d calls, want 2 (claim + complete)", n)
	}
	d, err := st.Claim(ctx, dedup.ClaimRequest{Key: "ns#new", PayloadHash: "h", Owner: "b", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || d.Acquired || d.Existing.Status != dedup.StatusCompleted || string(d.Existing.Response) != "r" {
		t.Fatal(d, err)
	}
	if n := calls.take(); n != 1 {
		t.Fatalf("a duplicate took %d calls, want 1 (the record comes back with the condition failure)", n)
	}
	one, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: "ns#one", PayloadHash: "h", Owner: "a", Response: []byte("r"), Now: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil || !one.Acquired {
		t.Fatal(one, err)
	}
	if n := calls.take(); n != 1 {
		t.Fatalf("one-round-trip took %d calls, want 1", n)
	}
}

func TestTransactions(t *testing.T) {
	calls := &calls{}
	c := dynamoClient(t, testenv.DynamoDBEndpoint(t), calls)
	inv := newInventory(t, c)
	inv.stock(t, "s", 5)
	st := newStore(t, c, recordsTable(t, c))
	ctx := context.Background()
	now := time.Now()

	// Claim, then commit the reservation with COMPLETED.
	cl, _ := st.Claim(ctx, dedup.ClaimRequest{Key: "ns#o1", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: now.Add(time.Hour), Writes: []dedup.Write{inv.reserve("s", 3)}}); err != nil {
		t.Fatal(err)
	}
	if a, r := inv.levels(t, "s"); a != 2 || r != 3 {
		t.Fatalf("after reserving 3 of 5: available %d reserved %d", a, r)
	}
	// Insufficient stock cancels both: the record stays PENDING.
	cl, _ = st.Claim(ctx, dedup.ClaimRequest{Key: "ns#o2", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
	err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: now.Add(time.Hour), Writes: []dedup.Write{inv.reserve("s", 3)}})
	var be *dedup.BusinessConditionError
	if !errors.As(err, &be) || be.Index != 0 {
		t.Fatalf("out of stock: %v, want a business condition failure at write 0", err)
	}
	if r, _ := st.Get(ctx, "ns#o2"); r.Status != dedup.StatusPending {
		t.Fatalf("a cancelled transaction moved the record to %s", r.Status)
	}
	// One round trip: the same, with no orphan record at all.
	_, err = st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: "ns#o3", Owner: "a", Now: now, ExpiresAt: now.Add(time.Hour), Writes: []dedup.Write{inv.reserve("s", 3)}})
	if !errors.As(err, &be) {
		t.Fatalf("one round trip out of stock: %v", err)
	}
	if _, err := st.Get(ctx, "ns#o3"); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("a cancelled one-round-trip left a record: %v", err)
	}
	if a, r := inv.levels(t, "s"); a != 2 || r != 3 {
		t.Fatalf("cancelled transactions changed stock: available %d reserved %d", a, r)
	}
	// 101 items are refused before anything is sent.
	writes := make([]dedup.Write, 100)
	for i := range writes {
		writes[i] = inv.reserve("s", 1)
	}
	calls.reset()
	err = st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: now.Add(time.Hour), Writes: writes})
	if !errors.Is(err, dedup.ErrTooManyWrites) || calls.total() != 0 {
		t.Fatalf("101 items: %v after %d calls, want ErrTooManyWrites before any call", err, calls.total())
	}
}

// stepClock is a consumer.Clock the test moves.
type stepClock struct{ now atomic.Pointer[time.Time] }

func (c *stepClock) Now() time.Time  { return *c.now.Load() }
func (c *stepClock) set(t time.Time) { c.now.Store(&t) }

// Through the consumer's Guard, with its default COMPLETED-record cache in
// front of DynamoDB: the first delivery takes claim + complete, every later
// duplicate on this worker takes no DynamoDB call at all, and once the
// record's retention is over the cache no longer answers.
func TestCachedDuplicatesMakeNoCall(t *testing.T) {
	calls := &calls{}
	c := dynamoClient(t, testenv.DynamoDBEndpoint(t), calls)
	table := recordsTable(t, c)
	clock := &stepClock{}
	start := time.Now()
	clock.set(start)
	handled := 0
	// The guard runs on a clock of its own, hours from the real one.
	g, err := consumer.NewGuard(newStore(t, c, table, dynamostore.WithoutClockCheck()), consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		handled++
		return consumer.Result{Response: []byte("ok")}, nil
	}), consumer.WithClock(clock), consumer.Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	msg := func() *consumer.Message {
		return &consumer.Message{ID: "m", Body: []byte("order-1"), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "order-1"}, Deliveries: 1}
	}
	ctx := context.Background()
	calls.reset()
	if o := g.Process(ctx, msg()); o.Kind != consumer.Processed {
		t.Fatalf("first: %v (%v)", o.Kind, o.Err)
	}
	if n := calls.take(); n != 2 {
		t.Fatalf("first delivery: %d calls, want 2", n)
	}
	for i := range 3 {
		clock.set(start.Add(time.Duration(i+1) * 2 * time.Second)) // within the cache's max age
		if o := g.Process(ctx, msg()); o.Kind != consumer.Duplicate || string(o.Response) != "ok" {
			t.Fatalf("duplicate %d: %v %q (%v)", i, o.Kind, o.Response, o.Err)
		}
	}
	if n := calls.take(); n != 0 {
		t.Fatalf("3 duplicates of a COMPLETED key: %d DynamoDB calls, want 0", n)
	}
	clock.set(start.Add(2 * time.Hour)) // past the record's expires_at
	if o := g.Process(ctx, msg()); o.Kind != consumer.Processed {
		t.Fatalf("after expiry: %v (%v), want processed again", o.Kind, o.Err)
	}
	if n := calls.total(); n == 0 || handled != 2 {
		t.Fatalf("after expiry: %d calls, handler ran %d times; the cache must not answer", n, handled)
	}
}
