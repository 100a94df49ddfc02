package dynamostore_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/proccpu"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
)

// takingSender takes every entry and counts them: the benchmark measures
// the store's side of the relay.
type takingSender struct{ sent atomic.Int64 }

func (s *takingSender) Send(_ context.Context, entries []outbox.Entry) []error {
	s.sent.Add(int64(len(entries)))
	return make([]error, len(entries))
}

// BenchmarkOutboxRelayDynamoDB measures a Relay draining the DynamoDB
// outbox (entries committed beforehand, an order ID apiece as the
// OrderingKey, the relay's default pass size and lease) against a raw
// loop on a plain table holding the same items: query a page of 100,
// send it, delete it with BatchWriteItem calls of 25 side by side. Both
// send to a Sender that takes everything, so the figures are the store's
// work alone; one DynamoDB Local, in the same run.
func BenchmarkOutboxRelayDynamoDB(b *testing.B) {
	const entries, page = 1000, 100
	calls := &calls{}
	client := dynamoClient(b, testenv.DynamoDBEndpoint(b), calls)
	body := make([]byte, 1024)
	ctx := b.Context()
	var rawTime, relayTime, rawCPU, relayCPU time.Duration
	var rawCalls, relayCalls int
	for n := range b.N {
		// The raw side: a table of (pk, sk) items.
		raw := uniqueName("rawoutbox")
		if _, err := client.CreateTable(ctx, &ddb.CreateTableInput{
			TableName:            aws.String(raw),
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}, {AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}, {AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange}},
			BillingMode:          types.BillingModePayPerRequest,
		}); err != nil {
			b.Fatal(err)
		}
		put := func(i int) error {
			_, err := client.PutItem(ctx, &ddb.PutItemInput{TableName: aws.String(raw), Item: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "pending"}, "sk": &types.AttributeValueMemberS{Value: fmt.Sprintf("%012d", i)},
				"body": &types.AttributeValueMemberB{Value: body}, "key": &types.AttributeValueMemberS{Value: fmt.Sprintf("o-%d", i)},
			}})
			return err
		}
		if err := fill(entries, put); err != nil {
			b.Fatal(err)
		}
		var rawSent atomic.Int64
		calls.reset()
		cpu, start := proccpu.Used(), time.Now()
		for rawSent.Load() < entries {
			out, err := client.Query(ctx, &ddb.QueryInput{TableName: aws.String(raw), ConsistentRead: aws.Bool(true),
				KeyConditionExpression:    aws.String("pk = :pk"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "pending"}},
				Limit:                     aws.Int32(page)})
			if err != nil {
				b.Fatal(err)
			}
			rawSent.Add(int64(len(out.Items))) // sent
			var wg sync.WaitGroup
			for i := 0; i < len(out.Items); i += 25 {
				reqs := make([]types.WriteRequest, 0, 25)
				for _, it := range out.Items[i:min(i+25, len(out.Items))] {
					reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: map[string]types.AttributeValue{"pk": it["pk"], "sk": it["sk"]}}})
				}
				wg.Go(func() {
					if _, err := client.BatchWriteItem(ctx, &ddb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{raw: reqs}}); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
		}
		rawTime += time.Since(start)
		rawCPU += proccpu.Used() - cpu
		if n == 0 {
			b.Logf("raw requests by operation: %v, mean latency %v", calls.byOp(), calls.latency())
		}
		rawCalls += calls.take()

		// The relay's side: the same entries, committed to the outbox.
		st := newStore(b, client, recordsTable(b, client, dynamostore.WithOutbox()))
		commit := func(i int) error {
			now := time.Now()
			_, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: fmt.Sprintf("bench#%d-%d", n, i), PayloadHash: "h", Owner: "w",
				Now: now, ExpiresAt: now.Add(time.Hour), Outbox: []outbox.Message{{Destination: "orders", OrderingKey: fmt.Sprintf("o-%d", i), Body: body}}})
			return err
		}
		if err := fill(entries, commit); err != nil {
			b.Fatal(err)
		}
		sender := &takingSender{}
		relay, err := outbox.NewRelay(st.Outbox(), sender, outbox.PollInterval(10*time.Millisecond), outbox.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			b.Fatal(err)
		}
		calls.reset()
		cpu, start = proccpu.Used(), time.Now()
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- relay.Run(rctx) }()
		for sender.sent.Load() < entries {
			time.Sleep(time.Millisecond) // a benchmark's wait for its count, not a test's proof
		}
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		relayTime += time.Since(start)
		relayCPU += proccpu.Used() - cpu
		if n == 0 {
			b.Logf("relay requests by operation: %v, mean latency %v", calls.byOp(), calls.latency())
		}
		relayCalls += calls.take()
		if sent, _ := st.Outbox().Entries(ctx, outbox.Dispatched, 0); len(sent) != entries {
			b.Fatalf("the relay dispatched %d entries, want %d", len(sent), entries)
		}
	}
	rate := func(d time.Duration) float64 { return float64(entries*b.N) / d.Seconds() }
	perMsg := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(entries*b.N) }
	b.ReportMetric(rate(rawTime), "raw_msgs/s")
	b.ReportMetric(rate(relayTime), "relay_msgs/s")
	b.ReportMetric(rate(relayTime)/rate(rawTime), "ratio")
	b.ReportMetric(perMsg(rawCPU), "raw_cpu-us/msg")
	b.ReportMetric(perMsg(relayCPU), "relay_cpu-us/msg")
	b.ReportMetric(float64(rawCalls)/float64(entries*b.N), "raw_reqs/msg")
	b.ReportMetric(float64(relayCalls)/float64(entries*b.N), "relay_reqs/msg")
}

// fill runs f(0) … f(n-1), 32 at once, and returns the first error.
func fill(n int, f func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
