package dynamostore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// aheadClock is a worker's view of time: its lease looks expired to a
// worker whose clock is ahead, as if the first worker had stalled (a GC
// pause, a frozen VM) longer than the lease with no heartbeat running.
type aheadClock time.Duration

func (d aheadClock) Now() time.Time { return time.Now().Add(time.Duration(d)) }

// Worker A's handler stalls past its lease; worker B, a second Guard on
// the same table, takes the key over and completes it; A's commit is then
// fenced (lease lost, nothing committed, not acked), and the reservation,
// a business write in the COMPLETED transaction, happens once.
func TestLeaseTakeoverFencesStalledWorker(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	table := recordsTable(t, client)
	inv := newInventory(t, client)
	inv.stock(t, "sku-1", 10)
	// Worker B's clock is stood ahead to play A's stall.
	st := newStore(t, client, table, dynamostore.WithoutClockCheck())

	stalled, release := make(chan struct{}), make(chan struct{})
	slow := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		close(stalled)
		<-release // stalls, deaf to its context, like a handler stuck in a call
		return consumer.Result{Response: []byte("a"), Writes: []dedup.Write{inv.reserve("sku-1", 3)}}, nil
	})
	fast := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("b"), Writes: []dedup.Write{inv.reserve("sku-1", 3)}}, nil
	})
	opts := []consumer.GuardOption{consumer.HandlerTimeout(time.Minute), consumer.LeaseTTL(2 * time.Minute), consumer.Namespace(uniqueName("takeover"))}
	a, err := consumer.NewGuard(st, slow, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := consumer.NewGuard(st, fast, append(opts, consumer.WithClock(aheadClock(3*time.Minute)))...)
	if err != nil {
		t.Fatal(err)
	}
	msg := func(id string) *consumer.Message {
		return &consumer.Message{ID: id, Body: []byte(`{"order_id":"o-1"}`), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "o-1"}}
	}

	outA := make(chan consumer.Outcome, 1)
	go func() { outA <- a.Process(t.Context(), msg("m-1")) }()
	<-stalled
	ob := b.Process(t.Context(), msg("m-2")) // the redelivery, on the other worker
	if ob.Kind != consumer.Processed || ob.Action() != consumer.Ack || ob.Attempt != 1 {
		t.Fatalf("B: %v attempt %d, action %v (%v); want processed on attempt 1 (a stalled lease is no failed run), acked", ob.Kind, ob.Attempt, ob.Action(), ob.Err)
	}
	close(release)
	oa := <-outA
	if oa.Kind != consumer.LeaseLost || oa.Action() == consumer.Ack || !errors.Is(oa.Err, dedup.ErrLeaseLost) {
		t.Fatalf("A: %v, action %v (%v); want lease lost, not acked", oa.Kind, oa.Action(), oa.Err)
	}
	if avail, reserved := inv.levels(t, "sku-1"); avail != 7 || reserved != 3 {
		t.Fatalf("stock available %d reserved %d; want 7 and 3 (reserved once)", avail, reserved)
	}
	// A later duplicate, on either worker, gets B's answer and writes nothing.
	if od := a.Process(t.Context(), msg("m-3")); od.Kind != consumer.Duplicate || string(od.Response) != "b" {
		t.Fatalf("duplicate: %v %q (%v); want duplicate with B's response", od.Kind, od.Response, od.Err)
	}
	if _, reserved := inv.levels(t, "sku-1"); reserved != 3 {
		t.Fatalf("reserved %d after the duplicate, want 3", reserved)
	}
}
