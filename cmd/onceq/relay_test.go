package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/outbox"
)

func TestRelayUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"relay", "-store", "redis", "-send", "sqs"}, "keeps no outbox"},
		{[]string{"relay", "-store", "postgres"}, `-send ""`},
		{[]string{"relay", "-store", "postgres", "-send", "rabbitmq"}, `-send "rabbitmq"`},
		{[]string{"relay", "-store", "postgres", "-send", "franz"}, "needs -kafka-brokers"},
		{[]string{"relay", "-store", "postgres", "-send", "sqs", "-kafka-brokers", "b:9092"}, "-kafka-brokers goes with"},
		{[]string{"relay", "-send", "sqs"}, "-table is required"},
		{[]string{"relay", "-store", "postgres", "-send", "sqs", "stray"}, `unexpected argument "stray"`},
		{[]string{"inspect", "-store", "postgres", "-outbox", "LOST"}, `-outbox "LOST"`},
		{[]string{"inspect", "-store", "redis", "-outbox", "DEAD"}, "keeps no outbox"},
		{[]string{"inspect", "-store", "postgres", "-outbox", "DEAD", "-key-hash", "0123456789ab"}, "-key-hash does not go with it"},
	} {
		code, _, errOut := onceq(c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("onceq %s: exit %d, %q; want 2 and %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}

// onceq relay -store postgres sends committed entries to SQS and marks them
// dispatched; one to a queue that does not exist is kept DEAD, and onceq
// inspect -outbox DEAD shows it with its reason.
func TestRelayPostgresToSQS(t *testing.T) {
	url := testenv.PostgresURL(t)
	q := localSQS(t)
	queueURL, _ := createQueue(t, q, "onceq-cli-relay-"+tableName(t)[len("onceq_cli_"):], nil)
	t.Cleanup(func() {
		_, _ = q.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(queueURL)})
	})
	table := tableName(t)
	if code, _, errOut := onceq("create-table", "-store", "postgres", "-url", url, "-table", table); code != 0 {
		t.Fatalf("create-table: %s", errOut)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	defer conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+table+" CASCADE")
	st, err := pgstore.New(conn, pgstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outboxOf(st, "PostgreSQL"); err != nil {
		t.Skipf("this build's PostgreSQL store: %v", err)
	}
	now := time.Now()
	msgs := []outbox.Message{
		{Destination: queueURL, OrderingKey: "o-1", Body: []byte(`{"event":"order.reserved"}`)},
		{Destination: queueURL + "-missing", Body: []byte(`{"event":"lost"}`)},
	}
	if c, err := st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: "onceq#o-1", Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour), Outbox: msgs}); err != nil || !c.Acquired {
		t.Fatalf("commit: %+v %v", c, err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var code int
	var out, errOut bytes.Buffer
	wg.Go(func() {
		code = run(ctx, []string{"relay", "-store", "postgres", "-postgres-url", url, "-table", table, "-send", "sqs", "-poll", "100ms"}, &out, &errOut)
	})
	defer func() {
		if t.Failed() {
			t.Logf("relay output: %s\n%s", out.String(), errOut.String())
		}
	}()
	testenv.Eventually(t, 30*time.Second, "the relay did not dispatch the entry", func() bool {
		got, err := q.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(queueURL), MessageAttributeNames: []string{"All"}})
		return err == nil && len(got.Messages) == 1 &&
			aws.ToString(got.Messages[0].MessageAttributes["idempotency-key"].StringValue) == outbox.ID("onceq#o-1", 0)
	})
	testenv.Eventually(t, 30*time.Second, "the refused entry was not kept DEAD", func() bool {
		c, o, _ := onceq("inspect", "-store", "postgres", "-postgres-url", url, "-table", table, "-outbox", "dead")
		return c == 0 && strings.Contains(o, "-missing") && strings.Contains(o, "reason:")
	})
	cancel()
	wg.Wait()
	if code != 0 || !strings.Contains(out.String(), "sending the postgres outbox") {
		t.Fatalf("relay: exit %d, %s %s", code, out.String(), errOut.String())
	}
}

// The same on DynamoDB: onceq relay -store dynamodb sends what a commit
// put in the outbox table, and inspect -outbox DEAD shows the refused one.
func TestRelayDynamoDBToSQS(t *testing.T) {
	q := localSQS(t)
	db := localAWS(t)
	queueURL, _ := createQueue(t, q, "onceq-cli-relay-"+tableName(t)[len("onceq_cli_"):], nil)
	t.Cleanup(func() {
		_, _ = q.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(queueURL)})
	})
	table := tableName(t)
	if code, _, errOut := onceq("create-table", "-table", table, "-outbox"); code != 0 {
		t.Fatalf("create-table: %s", errOut)
	}
	st, err := dynamostore.New(db, dynamostore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	msgs := []outbox.Message{
		{Destination: queueURL, OrderingKey: "o-1", Body: []byte(`{"event":"order.reserved"}`)},
		{Destination: queueURL + "-missing", Body: []byte(`{"event":"lost"}`)},
	}
	if c, err := st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: "onceq#o-1", Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour), Outbox: msgs}); err != nil || !c.Acquired {
		t.Fatalf("commit: %+v %v", c, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var code int
	var out, errOut bytes.Buffer
	wg.Go(func() {
		code = run(ctx, []string{"relay", "-table", table, "-send", "sqs", "-poll", "100ms"}, &out, &errOut)
	})
	defer func() {
		if t.Failed() {
			t.Logf("relay output: %s\n%s", out.String(), errOut.String())
		}
	}()
	testenv.Eventually(t, 30*time.Second, "the relay did not dispatch the entry", func() bool {
		got, err := q.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(queueURL), MessageAttributeNames: []string{"All"}})
		return err == nil && len(got.Messages) == 1 &&
			aws.ToString(got.Messages[0].MessageAttributes["idempotency-key"].StringValue) == outbox.ID("onceq#o-1", 0)
	})
	testenv.Eventually(t, 30*time.Second, "the refused entry was not kept DEAD", func() bool {
		c, o, _ := onceq("inspect", "-table", table, "-outbox", "DEAD")
		return c == 0 && strings.Contains(o, "-missing") && strings.Contains(o, "reason:")
	})
	cancel()
	wg.Wait()
	if code != 0 || !strings.Contains(out.String(), "sending the dynamodb outbox") {
		t.Fatalf("relay: exit %d, %s %s", code, out.String(), errOut.String())
	}
}
