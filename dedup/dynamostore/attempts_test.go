package dynamostore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// steppedClock is a worker's clock that a test moves on by hand.
type steppedClock struct{ off atomic.Int64 }

func (c *steppedClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *steppedClock) advance(d time.Duration) { c.off.Add(int64(d)) }
func keyedOrder(id string) *consumer.Message {
	return &consumer.Message{ID: id, Body: []byte(`{"order":"o-1"}`), Deliveries: 1,
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "o-1"}}
}

// The store is cut while the handler runs and restored after Process
// returns, so neither the Complete nor the give-back lands and the record
// is left PENDING; the next delivery takes that abandoned lease over. The
// handler never failed, so no outage spends an attempt: with MaxAttempts
// 2, three such outages still end in processed, never "attempts
// exhausted".
func TestOutageMidHandlerSpendsNoAttempt(t *testing.T) {
	rig := newFaultRig(t, fastPolicy(2), dynamostore.WithoutClockCheck())
	var cut atomic.Bool
	var runs atomic.Int32
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		runs.Add(1)
		if cut.Load() {
			rig.proxy.AddRule(faultproxy.Rule{Fault: faultproxy.InternalError})
		}
		return consumer.Result{Response: []byte("ok")}, nil
	})
	clk := &steppedClock{}
	g, err := consumer.NewGuard(rig.st, h, consumer.MaxAttempts(2), consumer.WithClock(clk),
		consumer.HandlerTimeout(time.Second), consumer.LeaseTTL(3*time.Second), consumer.Namespace(uniqueName("outage")))
	if err != nil {
		t.Fatal(err)
	}
	cut.Store(true)
	for i := range 3 {
		o := g.Process(t.Context(), keyedOrder("m"))
		rig.proxy.ClearRules()
		if o.Kind != consumer.StoreUnavailable || o.Attempt != 1 {
			t.Fatalf("delivery %d: %v attempt %d (%v), want store_unavailable on attempt 1", i+1, o.Kind, o.Attempt, o.Err)
		}
		clk.advance(time.Minute) // the abandoned lease and any margin are over
	}
	cut.Store(false)
	o := g.Process(t.Context(), keyedOrder("m"))
	if o.Kind != consumer.Processed || o.Attempt != 1 {
		t.Fatalf("after the outages: %v attempt %d (%v), want processed on attempt 1", o.Kind, o.Attempt, o.Err)
	}
	if n := runs.Load(); n != 4 {
		t.Fatalf("handler ran %d times, want 4", n)
	}
}

// A COMPLETED record past its retention, not yet removed by TTL (DynamoDB
// takes up to days), is taken over as a new message: attempt 1 each time,
// never "attempts exhausted".
func TestCompletedPastRetentionIsANewMessage(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	st := newStore(t, client, recordsTable(t, client), dynamostore.WithoutClockCheck())
	var runs atomic.Int32
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		runs.Add(1)
		return consumer.Result{Response: []byte("ok")}, nil
	})
	clk := &steppedClock{}
	g, err := consumer.NewGuard(st, h, consumer.MaxAttempts(2), consumer.WithClock(clk), consumer.Retention(4*time.Second),
		consumer.HandlerTimeout(time.Second), consumer.LeaseTTL(3*time.Second), consumer.Namespace(uniqueName("retention")))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		o := g.Process(t.Context(), keyedOrder("m"))
		if o.Kind != consumer.Processed || o.Attempt != 1 {
			t.Fatalf("delivery %d: %v attempt %d (%v), want processed on attempt 1", i+1, o.Kind, o.Attempt, o.Err)
		}
		clk.advance(10 * time.Second) // past retention
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want 3", n)
	}
}

type expiredSeen struct{ n atomic.Int32 }

func (e *expiredSeen) OnClaimExpiredPresent(context.Context, *consumer.Message, string) { e.n.Add(1) }

// One round trip with business writes (a transaction, which returns no
// values) still reports the expired record it took over.
func TestOneRoundTripReportsExpiredPresent(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	st := newStore(t, client, recordsTable(t, client), dynamostore.WithoutClockCheck())
	inv := newInventory(t, client)
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("ok"), Writes: []dedup.Write{inv.note(uniqueName("n"))}}, nil
	})
	clk, seen := &steppedClock{}, &expiredSeen{}
	g, err := consumer.NewGuard(st, h, consumer.OneRoundTrip(), consumer.WithClock(clk), consumer.Retention(4*time.Second),
		consumer.HandlerTimeout(time.Second), consumer.LeaseTTL(3*time.Second), consumer.WithHooks(seen), consumer.Namespace(uniqueName("oneshot")))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if o := g.Process(t.Context(), keyedOrder("m")); o.Kind != consumer.Processed || o.Attempt != 1 {
			t.Fatalf("delivery %d: %v attempt %d (%v)", i+1, o.Kind, o.Attempt, o.Err)
		}
		clk.advance(10 * time.Second)
	}
	if n := seen.n.Load(); n != 1 {
		t.Fatalf("ExpiredPresent hook called %d times, want 1", n)
	}
}

// An operator deletes a COMPLETED record to have it reprocessed: a worker
// whose COMPLETED cache holds it answers duplicates for at most the
// cache's MaxAge (10 s by default), then asks the store and processes the
// message (issue 26.5).
func TestDeletedRecordLeavesTheCacheWithinItsMaxAge(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	table := recordsTable(t, client)
	st := newStore(t, client, table)
	var runs atomic.Int32
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		runs.Add(1)
		return consumer.Result{Response: []byte("ok")}, nil
	})
	clk := &steppedClock{}
	ns := uniqueName("deleted")
	g, err := consumer.NewGuard(st, h, consumer.WithClock(clk), consumer.Namespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	if o := g.Process(t.Context(), keyedOrder("m")); o.Kind != consumer.Processed {
		t.Fatalf("first delivery: %v (%v)", o.Kind, o.Err)
	}
	if _, err := client.DeleteItem(t.Context(), &ddb.DeleteItemInput{TableName: aws.String(table),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: ns + "#o-1"}}}); err != nil {
		t.Fatal(err)
	}
	clk.advance(5 * time.Second)
	if o := g.Process(t.Context(), keyedOrder("m")); o.Kind != consumer.Duplicate {
		t.Fatalf("within the cache's max age: %v (%v), want the cached duplicate", o.Kind, o.Err)
	}
	clk.advance(6 * time.Second)
	if o := g.Process(t.Context(), keyedOrder("m")); o.Kind != consumer.Processed || runs.Load() != 2 {
		t.Fatalf("past the cache's max age: %v (%v), %d runs; want processed again", o.Kind, o.Err, runs.Load())
	}
}
