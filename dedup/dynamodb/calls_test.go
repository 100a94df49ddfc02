package dynamodb_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testenv"
)

// countingClient counts every DynamoDB call the client sends.
func countingClient(t *testing.T) (*ddb.Client, *atomic.Int64) {
	t.Helper()
	ep := testenv.DynamoDBEndpoint(t)
	var n atomic.Int64
	count := middleware.FinalizeMiddlewareFunc("count", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		n.Add(1)
		return next.HandleFinalize(ctx, in)
	})
	c := ddb.NewFromConfig(testenv.AWSConfig(t, ep), func(o *ddb.Options) {
		o.BaseEndpoint = aws.String(ep)
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error { return s.Finalize.Add(count, middleware.After) })
	})
	return c, &n
}

func TestCallsPerMessage(t *testing.T) {
	c, calls := countingClient(t)
	table := newTable(t, c)
	st := newStore(t, c, table)
	ctx := context.Background()
	now := time.Now()

	calls.Store(0)
	cl, err := st.Claim(ctx, dedup.ClaimRequest{Key: "ns#new", PayloadHash: "h", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !cl.Acquired {
		t.Fatal(cl, err)
	}
	if err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Response: []byte("r"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if n := calls.Swap(0); n != 2 {
		t.Fatalf("a new message took %d calls, want 2 (claim + complete)", n)
	}
	d, err := st.Claim(ctx, dedup.ClaimRequest{Key: "ns#new", PayloadHash: "h", Owner: "b", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || d.Acquired || d.Existing.Status != dedup.StatusCompleted || string(d.Existing.Response) != "r" {
		t.Fatal(d, err)
	}
	if n := calls.Swap(0); n != 1 {
		t.Fatalf("a duplicate took %d calls, want 1 (the record comes back with the condition failure)", n)
	}
	one, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: "ns#one", PayloadHash: "h", Owner: "a", Response: []byte("r"), Now: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil || !one.Acquired {
		t.Fatal(one, err)
	}
	if n := calls.Swap(0); n != 1 {
		t.Fatalf("one-round-trip took %d calls, want 1", n)
	}
}

func inventoryTable(t *testing.T, c *ddb.Client, stock int) string {
	t.Helper()
	ctx := context.Background()
	name := newTable(t, c) + "_inv"
	if _, err := c.CreateTable(ctx, &ddb.CreateTableInput{TableName: aws.String(name), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("sku"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("sku"), KeyType: types.KeyTypeHash}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutItem(ctx, &ddb.PutItemInput{TableName: aws.String(name), Item: map[string]types.AttributeValue{
		"sku": &types.AttributeValueMemberS{Value: "s"}, "available": num(stock), "reserved": num(0)}}); err != nil {
		t.Fatal(err)
	}
	return name
}

func num(n int) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.Itoa(n)}
}

func reserve(table string, qty int) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: "s"}},
		UpdateExpression:          aws.String("SET available = available - :q, reserved = reserved + :q"),
		ConditionExpression:       aws.String("available >= :q"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":q": num(qty)},
	}}
}

func stock(t *testing.T, c *ddb.Client, table string) (available, reserved string) {
	t.Helper()
	out, err := c.GetItem(context.Background(), &ddb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: "s"}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item["available"].(*types.AttributeValueMemberN).Value, out.Item["reserved"].(*types.AttributeValueMemberN).Value
}

func TestTransactions(t *testing.T) {
	c, calls := countingClient(t)
	table := newTable(t, c)
	inv := inventoryTable(t, c, 5)
	st := newStore(t, c, table)
	ctx := context.Background()
	now := time.Now()

	// Claim, then commit the reservation with COMPLETED.
	cl, _ := st.Claim(ctx, dedup.ClaimRequest{Key: "ns#o1", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: now.Add(time.Hour), Writes: []any{reserve(inv, 3)}}); err != nil {
		t.Fatal(err)
	}
	if a, r := stock(t, c, inv); a != "2" || r != "3" {
		t.Fatalf("after reserving 3 of 5: available %s reserved %s", a, r)
	}
	// Insufficient stock cancels both: the record stays PENDING.
	cl, _ = st.Claim(ctx, dedup.ClaimRequest{Key: "ns#o2", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
	err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: now.Add(time.Hour), Writes: []any{reserve(inv, 3)}})
	var be *dedup.BusinessConditionError
	if !errors.As(err, &be) || be.Index != 0 {
		t.Fatalf("out of stock: %v, want a business condition failure at write 0", err)
	}
	if r, _ := st.Get(ctx, "ns#o2"); r.Status != dedup.StatusPending {
		t.Fatalf("a cancelled transaction moved the record to %s", r.Status)
	}
	// One round trip: the same, with no orphan record at all.
	_, err = st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: "ns#o3", Owner: "a", Now: now, ExpiresAt: now.Add(time.Hour), Writes: []any{reserve(inv, 3)}})
	if !errors.As(err, &be) {
		t.Fatalf("one round trip out of stock: %v", err)
	}
	if _, err := st.Get(ctx, "ns#o3"); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("a cancelled one-round-trip left a record: %v", err)
	}
	if a, r := stock(t, c, inv); a != "2" || r != "3" {
		t.Fatalf("cancelled transactions changed stock: available %s reserved %s", a, r)
	}
	// 101 items are refused before anything is sent.
	writes := make([]any, 100)
	for i := range writes {
		writes[i] = reserve(inv, 1)
	}
	calls.Store(0)
	err = st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: now.Add(time.Hour), Writes: writes})
	if !errors.Is(err, dedup.ErrTooManyWrites) || calls.Load() != 0 {
		t.Fatalf("101 items: %v after %d calls, want ErrTooManyWrites before any call", err, calls.Load())
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
	c, calls := countingClient(t)
	table := newTable(t, c)
	clock := &stepClock{}
	start := time.Now()
	clock.set(start)
	handled := 0
	g, err := consumer.NewGuard(newStore(t, c, table), consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		handled++
		return consumer.Result{Response: []byte("ok")}, nil
	}), consumer.WithClock(clock), consumer.Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	msg := func() *consumer.Message {
		return &consumer.Message{ID: "m", Body: []byte("order-1"), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "order-1"}, Attempt: 1}
	}
	ctx := context.Background()
	calls.Store(0)
	if o := g.Process(ctx, msg()); o.Kind != consumer.Processed {
		t.Fatalf("first: %v (%v)", o.Kind, o.Err)
	}
	if n := calls.Swap(0); n != 2 {
		t.Fatalf("first delivery: %d calls, want 2", n)
	}
	for i := range 3 {
		clock.set(start.Add(time.Duration(i+1) * time.Minute))
		if o := g.Process(ctx, msg()); o.Kind != consumer.Duplicate || string(o.Response) != "ok" {
			t.Fatalf("duplicate %d: %v %q (%v)", i, o.Kind, o.Response, o.Err)
		}
	}
	if n := calls.Swap(0); n != 0 {
		t.Fatalf("3 duplicates of a COMPLETED key: %d DynamoDB calls, want 0", n)
	}
	clock.set(start.Add(2 * time.Hour)) // past the record's expires_at
	if o := g.Process(ctx, msg()); o.Kind != consumer.Processed {
		t.Fatalf("after expiry: %v (%v), want processed again", o.Kind, o.Err)
	}
	if n := calls.Load(); n == 0 || handled != 2 {
		t.Fatalf("after expiry: %d calls, handler ran %d times; the cache must not answer", n, handled)
	}
}
