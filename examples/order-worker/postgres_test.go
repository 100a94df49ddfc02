package main

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/internal/testenv"
)

// The example with -store postgres on the SQS emulator: the same 2,000
// orders as on DynamoDB, each accepted order reserved once in the same
// transaction as its COMPLETED record, the ones beyond the stock rejected.
func TestWorkerOnSQSAndPostgres(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	q, _, suffix := localAWS(t)
	ctx := context.Background()
	queue, dlq := createQueue(t, q, "orders-"+suffix, nil), createQueue(t, q, "orders-dlq-"+suffix, nil)
	f := newOrderFixture()
	for i := 0; i < len(f.bodies); i += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j := i; j < min(i+10, len(f.bodies)); j++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)), MessageBody: aws.String(f.bodies[j])})
		}
		if _, err := q.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(queue), Entries: entries}); err != nil {
			t.Fatal(err)
		}
	}
	idem, inv, orders := "idem_"+suffix, "inv_"+suffix, "orders_"+suffix
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	defer pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+idem+", "+inv+", "+orders)

	opts, err := parseFlags([]string{"-source", "sqs", "-store", "postgres", "-postgres-url", pgURL, "-sqs-queue-url", queue, "-sqs-dlq-url", dlq,
		"-create-tables", "-idempotency-table", idem, "-inventory-table", inv, "-orders-table", orders,
		"-progress", "1h", "-metrics-addr", "127.0.0.1:0"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	summary, _ := runWorker(t, opts, len(f.bodies))
	f.checkTotals(t, summary, 0, func() (int64, int, error) { return newPGInventory(inv, orders).totals(ctx, pool) })
}
