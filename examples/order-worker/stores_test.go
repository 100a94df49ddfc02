package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/internal/testsupport/testenv"
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

// The demo with -store redis: the records in Redis, the reservations made
// by the handler in the memory inventory. Orders beyond the stock are
// answered "rejected" by the handler (processed, not the Rejected outcome
// of a cancelled commit); every other order is reserved once.
func TestDemoOnRedis(t *testing.T) {
	addr := testenv.RedisAddr(t)
	var out, errOut bytes.Buffer
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	if code := run([]string{"-demo", "2000", "-store", "redis", "-redis-addr", addr, "-idempotency-table", "order-worker-test-" + hex.EncodeToString(b),
		"-progress", "1h", "-metrics-addr", ""}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var s Summary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("summary %q: %v", out.String(), err)
	}
	const deliveries, malformed = 2000, 4
	dups := int64((deliveries - malformed) / 5)
	unique := int64(deliveries-malformed) - dups
	if s.DeadLettered != malformed || s.Duplicates != dups || s.Rejected != 0 || s.Processed != unique ||
		!strings.Contains(errOut.String(), "over "+strconv.FormatInt(unique-10, 10)+" orders") {
		t.Fatalf("summary %+v (%s); want %d dead-lettered, %d duplicates, %d processed, %d orders reserved", s, errOut.String(), malformed, dups, unique, unique-10)
	}
}
