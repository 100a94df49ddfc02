package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// The example against DynamoDB Local and the SQS emulator: 2,000 orders,
// 20% duplicate sends, 10 beyond the stock.
func TestWorkerOnSQSAndDynamoDB(t *testing.T) {
	q, db, suffix := localAWS(t)
	ctx := context.Background()
	queue, dlq := createQueue(t, q, "orders-"+suffix, nil), createQueue(t, q, "orders-dlq-"+suffix, nil)

	f := newOrderFixture()
	bodies := f.bodies
	for i := 0; i < len(bodies); i += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j := i; j < min(i+10, len(bodies)); j++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)), MessageBody: aws.String(bodies[j])})
		}
		if _, err := q.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(queue), Entries: entries}); err != nil {
			t.Fatal(err)
		}
	}

	opts, err := parseFlags([]string{"-source", "sqs", "-store", "dynamodb", "-sqs-queue-url", queue, "-sqs-dlq-url", dlq, "-create-tables",
		"-idempotency-table", "idem_" + suffix, "-inventory-table", "inv_" + suffix, "-orders-table", "orders_" + suffix,
		"-progress", "1h", "-metrics-addr", "127.0.0.1:0"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	summary, metrics := runWorker(t, opts, len(bodies))
	f.check(t, ctx, db, suffix, summary, 0)
	// The store and the source report to the same /metrics: every rejection
	// is a business write's cancelled condition; acks went out in batches.
	if n := sample(metrics, "onceq_dynamodb_transaction_cancellations_total", `transact_write_cancellation_reason="ConditionalCheckFailed"`); n < float64(f.scarce) {
		t.Errorf("ConditionalCheckFailed cancellations %v, want at least %d", n, f.scarce)
	}
	if n := sample(metrics, "onceq_sqs_delete_batches_total", `onceq_result="ok"`); n < 1 {
		t.Errorf("delete batches %v, want at least 1", n)
	}
}

// localAWS points the worker's standard SDK settings at DynamoDB Local and
// the SQS emulator, and returns clients for the test's own calls and a
// suffix that keeps the test's tables and queues apart from others'.
func localAWS(t *testing.T) (*awssqs.Client, *ddb.Client, string) {
	t.Helper()
	dbEP, sqsEP := testenv.DynamoDBEndpoint(t), testenv.SQSEndpoint(t)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", dbEP)
	t.Setenv("AWS_ENDPOINT_URL_SQS", sqsEP)
	t.Setenv("AWS_REGION", testenv.Region)
	t.Setenv("AWS_ACCESS_KEY_ID", testenv.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testenv.SecretAccessKey)
	cfg := awstest.Config(t, "")
	q := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(sqsEP) })
	db := ddb.NewFromConfig(cfg, func(o *ddb.Options) { o.BaseEndpoint = aws.String(dbEP) })
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return q, db, hex.EncodeToString(b)
}

// createQueue creates a queue with the given attributes and returns its URL.
func createQueue(t *testing.T, q *awssqs.Client, name string, attrs map[string]string) string {
	t.Helper()
	out, err := q.CreateQueue(t.Context(), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}

// orderFixture is the orders both end-to-end tests send: 1,600 unique
// orders, 400 duplicate deliveries of accepted ones, the first 10 beyond
// any sku's stock.
type orderFixture struct {
	bodies               []string
	unique, dups, scarce int
	wantReserved         int64
}

func newOrderFixture() orderFixture {
	f := orderFixture{unique: 1600, dups: 400, scarce: 10}
	for i := range f.unique {
		qty := int64(1 + i%3)
		if i < f.scarce {
			qty = 2_000_000
		} else {
			f.wantReserved += qty
		}
		f.bodies = append(f.bodies, fmt.Sprintf(`{"order_id":"o-%d","sku":"sku-%d","qty":%d}`, i, i%100, qty))
	}
	for i := range f.dups {
		f.bodies = append(f.bodies, f.bodies[f.scarce+(i*7)%(f.unique-f.scarce)])
	}
	return f
}

// check compares the worker's summary line and the tables with what the
// fixture makes: each accepted order reserved once, each row written once.
func (f orderFixture) check(t *testing.T, ctx context.Context, db *ddb.Client, suffix string, summaryLine []byte, deadLettered int64) Summary {
	t.Helper()
	return f.checkTotals(t, summaryLine, deadLettered, func() (int64, int, error) {
		return dynamoTotals(ctx, db, "inv_"+suffix, "orders_"+suffix)
	})
}

// checkTotals is check over the totals of any inventory.
func (f orderFixture) checkTotals(t *testing.T, summaryLine []byte, deadLettered int64, totals func() (reserved int64, rows int, err error)) Summary {
	t.Helper()
	var s Summary
	if err := json.Unmarshal(summaryLine, &s); err != nil {
		t.Fatalf("summary %q: %v", summaryLine, err)
	}
	accepted := int64(f.unique - f.scarce)
	if s.Processed != accepted || s.Rejected != int64(f.scarce) || s.Duplicates != int64(f.dups) || s.DeadLettered != deadLettered || s.LeaseLost != 0 {
		t.Fatalf("summary %+v; want %d processed, %d rejected, %d duplicates, %d dead-lettered", s, accepted, f.scarce, f.dups, deadLettered)
	}
	reserved, rows, err := totals()
	if err != nil {
		t.Fatal(err)
	}
	if reserved != f.wantReserved || int64(rows) != accepted {
		t.Fatalf("reserved %d over %d rows; want %d over %d", reserved, rows, f.wantReserved, accepted)
	}
	return s
}

// runWorker runs the worker until it settled messages and returns its
// summary line and what /metrics said just before it exited.
func runWorker(t *testing.T, opts options, messages int) (summary []byte, metrics string) {
	t.Helper()
	opts.stopAfter = messages
	opts.beforeExit = func(addr string) { _, metrics = scrape(t, "http://"+addr+"/metrics") }
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := work(ctx, opts, &out, &errOut); err != nil {
		t.Fatalf("work: %v\n%s", err, errOut.String())
	}
	return out.Bytes(), metrics
}
