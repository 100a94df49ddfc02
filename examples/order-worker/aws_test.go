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

	"github.com/onceq/onceq/internal/testenv"
)

// The example against DynamoDB Local and the SQS emulator: 2,000 orders,
// 20% duplicate sends, 10 beyond the stock.
func TestWorkerOnSQSAndDynamoDB(t *testing.T) {
	dbEP, sqsEP := testenv.DynamoDBEndpoint(t), testenv.SQSEndpoint(t)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", dbEP)
	t.Setenv("AWS_ENDPOINT_URL_SQS", sqsEP)
	t.Setenv("AWS_REGION", testenv.Region)
	t.Setenv("AWS_ACCESS_KEY_ID", testenv.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testenv.SecretAccessKey)
	ctx := context.Background()
	cfg := testenv.AWSConfig(t, "")
	q := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(sqsEP) })
	db := ddb.NewFromConfig(cfg, func(o *ddb.Options) { o.BaseEndpoint = aws.String(dbEP) })
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	queue, err := q.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-" + suffix)})
	if err != nil {
		t.Fatal(err)
	}

	const unique, dups, scarce = 1600, 400, 10
	var bodies []string
	var want int64
	for i := range unique {
		qty := int64(1 + i%3)
		if i < scarce {
			qty = 2_000_000
		} else {
			want += qty
		}
		bodies = append(bodies, fmt.Sprintf(`{"order_id":"o-%d","sku":"sku-%d","qty":%d}`, i, i%100, qty))
	}
	for i := range dups {
		bodies = append(bodies, bodies[scarce+(i*7)%(unique-scarce)])
	}
	for i := 0; i < len(bodies); i += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j := i; j < min(i+10, len(bodies)); j++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)), MessageBody: aws.String(bodies[j])})
		}
		if _, err := q.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: queue.QueueUrl, Entries: entries}); err != nil {
			t.Fatal(err)
		}
	}

	opts, err := parseFlags([]string{"-source", "sqs", "-store", "dynamodb", "-sqs-queue-url", *queue.QueueUrl, "-create-tables",
		"-idempotency-table", "idem_" + suffix, "-inventory-table", "inv_" + suffix, "-orders-table", "orders_" + suffix,
		"-progress", "1h", "-metrics-addr", "127.0.0.1:0"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	opts.stopAfter = len(bodies)
	var metrics string
	opts.beforeExit = func(addr string) { _, metrics = scrape(t, "http://"+addr+"/metrics") }
	var out, errOut bytes.Buffer
	runCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := work(runCtx, opts, &out, &errOut); err != nil {
		t.Fatalf("work: %v\n%s", err, errOut.String())
	}
	var s Summary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("summary %q: %v", out.String(), err)
	}
	if s.Processed != unique-scarce || s.Rejected != scarce || s.Duplicates != dups || s.DeadLettered != 0 || s.LeaseLost != 0 {
		t.Fatalf("summary %+v", s)
	}
	reserved, rows, err := dynamoTotals(ctx, db, "inv_"+suffix, "orders_"+suffix)
	if err != nil {
		t.Fatal(err)
	}
	if reserved != want || rows != unique-scarce {
		t.Fatalf("reserved %d over %d rows; want %d over %d", reserved, rows, want, unique-scarce)
	}
	// The store and the source report to the same /metrics: every rejection
	// is a business write's cancelled condition; acks went out in batches.
	if n := sample(metrics, "onceq_dynamodb_transaction_cancellations_total", `transact_write_cancellation_reason="ConditionalCheckFailed"`); n < float64(scarce) {
		t.Errorf("ConditionalCheckFailed cancellations %v, want at least %d", n, scarce)
	}
	if n := sample(metrics, "onceq_sqs_delete_batches_total", `onceq_result="ok"`); n < 1 {
		t.Errorf("delete batches %v, want at least 1", n)
	}
}
