package dynamostore_test

import (
	"context"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/dynamostore/internal/ddbtest"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
)

// calls counts DynamoDB requests by operation, from SDK middleware placed
// after the retry step, so every HTTP attempt is one call.
type calls struct {
	mu   sync.Mutex
	by   map[string]int
	took map[string]time.Duration // each operation's calls' time together
}

func (c *calls) add(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]int{}
	}
	c.by[op]++
}

func (c *calls) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sum()
}

func (c *calls) sum() int {
	n := 0
	for _, v := range c.by {
		n += v
	}
	return n
}

func (c *calls) get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[op]
}

// byOp is a copy of the counts by operation.
func (c *calls) byOp() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.by)
}

// latency is each operation's mean time a call.
func (c *calls) latency() map[string]time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]time.Duration{}
	for op, d := range c.took {
		out[op] = d / time.Duration(c.by[op])
	}
	return out
}

// take returns the total and resets.
func (c *calls) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.sum()
	c.by, c.took = nil, nil
	return n
}

func (c *calls) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.by, c.took = nil, nil
}

func (c *calls) middleware(st *middleware.Stack) error {
	return st.Finalize.Add(middleware.FinalizeMiddlewareFunc("onceqCountCalls",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			op := middleware.GetOperationName(ctx)
			c.add(op)
			start := time.Now()
			out, md, err := next.HandleFinalize(ctx, in)
			c.mu.Lock()
			if c.took == nil {
				c.took = map[string]time.Duration{}
			}
			c.took[op] += time.Since(start)
			c.mu.Unlock()
			return out, md, err
		}), middleware.After)
}

// dynamoClient is a client of endpoint (DynamoDB Local or a fault proxy in
// front of it), counting its calls into c when c is not nil.
func dynamoClient(t testing.TB, endpoint string, c *calls) *ddb.Client {
	t.Helper()
	cfg := awstest.Config(t, endpoint)
	cfg.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConnsPerHost = 128
		tr.MaxIdleConns = 256
	})
	return ddb.NewFromConfig(cfg, func(o *ddb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		if c != nil {
			o.APIOptions = append(o.APIOptions, c.middleware)
		}
	})
}

func uniqueName(prefix string) string { return ddbtest.UniqueName(prefix) }

func uniqueKey(testing.TB) string { return ddbtest.UniqueKey() }

// whole-second times an hour ahead, as the conformance suite uses.
func clock() func(sec int) time.Time {
	t0 := time.Now().Add(time.Hour).Truncate(time.Second)
	return func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
}

// inventory is the order-worker's stock table: sku → available, reserved.
type inventory struct {
	client *ddb.Client
	table  string
}

func newInventory(t testing.TB, client *ddb.Client) *inventory {
	t.Helper()
	inv := &inventory{client: client, table: uniqueName("onceq_inv_")}
	_, err := client.CreateTable(t.Context(), &ddb.CreateTableInput{
		TableName:            aws.String(inv.table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("sku"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("sku"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatalf("create inventory table: %v", err)
	}
	return inv
}

func (inv *inventory) stock(t testing.TB, sku string, available int) {
	t.Helper()
	_, err := inv.client.PutItem(t.Context(), &ddb.PutItemInput{
		TableName: aws.String(inv.table),
		Item: map[string]types.AttributeValue{
			"sku":       &types.AttributeValueMemberS{Value: sku},
			"available": &types.AttributeValueMemberN{Value: strconv.Itoa(available)},
			"reserved":  &types.AttributeValueMemberN{Value: "0"},
		},
	})
	if err != nil {
		t.Fatalf("stock %s: %v", sku, err)
	}
}

// levels reads available and reserved.
func (inv *inventory) levels(t testing.TB, sku string) (available, reserved int) {
	t.Helper()
	out, err := inv.client.GetItem(t.Context(), &ddb.GetItemInput{
		TableName: aws.String(inv.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: sku}},
	})
	if err != nil {
		t.Fatalf("read %s: %v", sku, err)
	}
	n := func(name string) int {
		v, ok := out.Item[name].(*types.AttributeValueMemberN)
		if !ok {
			t.Fatalf("%s of %s is %T", name, sku, out.Item[name])
		}
		i, _ := strconv.Atoi(v.Value)
		return i
	}
	return n("available"), n("reserved")
}

// reserve is the order-worker's write: take qty from available into reserved.
func (inv *inventory) reserve(sku string, qty int) dynamostore.Write {
	q := &types.AttributeValueMemberN{Value: strconv.Itoa(qty)}
	return dynamostore.Write{Update: &types.Update{
		TableName:                 aws.String(inv.table),
		Key:                       map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: sku}},
		UpdateExpression:          aws.String("SET available = available - :q, reserved = reserved + :q"),
		ConditionExpression:       aws.String("available >= :q"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":q": q},
	}}
}

// note is an unconditional Put of a row in the inventory table.
func (inv *inventory) note(sku string) dynamostore.Write {
	return dynamostore.Write{Put: &types.Put{
		TableName: aws.String(inv.table),
		Item:      map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: sku}},
	}}
}

func mustClaim(t testing.TB, st dedup.Store, req dedup.ClaimRequest) dedup.Claim {
	t.Helper()
	return ddbtest.MustClaim(t, st, req)
}

// recordsTable makes a fresh records table.
func recordsTable(t testing.TB, client *ddb.Client, opts ...dynamostore.TableOption) string {
	t.Helper()
	return ddbtest.RecordsTable(t, client, opts...)
}

// newStore is dynamostore.New for tests (ddbtest.NewStore): its clock
// check is off, since most tests drive claims with a clock of their own
// (clock()); a test of the check turns it on.
func newStore(tb testing.TB, client *ddb.Client, table string, opts ...dynamostore.Option) *dynamostore.Store {
	tb.Helper()
	return ddbtest.NewStore(tb, client, table, opts...)
}

// countedStore is a store on a fresh records table of DynamoDB Local,
// its client counting every call into c.
func countedStore(t testing.TB) (st *dynamostore.Store, client *ddb.Client, c *calls) {
	t.Helper()
	c = &calls{}
	client = dynamoClient(t, testenv.DynamoDBEndpoint(t), c)
	return newStore(t, client, recordsTable(t, client)), client, c
}

// concurrently runs f(0) … f(n-1), each in its own goroutine, and once all
// are done fails the test with the first error any returned.
func concurrently(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := f(i); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Hook adapters: a func per hook interface.
type (
	onCall           func(ctx context.Context, op string, took time.Duration, err error)
	onRetry          func(ctx context.Context, op string, class retry.Class, code string)
	onCancellation   func(ctx context.Context, op, reason string)
	onExpiredPresent func(ctx context.Context, op string)
)

func (f onCall) OnStoreCall(ctx context.Context, op string, took time.Duration, err error) {
	f(ctx, op, took, err)
}
func (f onRetry) OnStoreRetry(ctx context.Context, op string, c retry.Class, code string) {
	f(ctx, op, c, code)
}
func (f onCancellation) OnDynamoCancellation(ctx context.Context, op, reason string) {
	f(ctx, op, reason)
}
func (f onExpiredPresent) OnDynamoExpiredPresent(ctx context.Context, op string) { f(ctx, op) }
