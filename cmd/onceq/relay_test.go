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
	"github.com/onceq/onceq/internal/testsupport/testenv"
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

// relayCase is a store with a record table ready, for relayToSQS.
type relayCase struct {
	// storeArgs name the store to onceq relay and inspect.
	storeArgs []string
	// commit commits a COMPLETED record with msgs as its outbox.
	commit func(t *testing.T, key string, msgs []outbox.Message)
	name   string // as onceq relay prints it
}

// relayToSQS commits two entries, one to an SQS queue and one to a queue
// that does not exist, and runs onceq relay: the first reaches the queue
// with its ID as its idempotency key, the second is kept DEAD, which
// onceq inspect -outbox DEAD shows with its reason.
func relayToSQS(t *testing.T, q *awssqs.Client, c relayCase) {
	t.Helper()
	queueURL, _ := createQueue(t, q, "onceq-cli-relay-"+tableName(t)[len("onceq_cli_"):], nil)
	t.Cleanup(func() {
		_, _ = q.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(queueURL)})
	})
	c.commit(t, "onceq#o-1", []outbox.Message{
		{Destination: queueURL, OrderingKey: "o-1", Body: []byte(`{"event":"order.reserved"}`)},
		{Destination: queueURL + "-missing", Body: []byte(`{"event":"lost"}`)},
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var code int
	var out, errOut bytes.Buffer
	wg.Go(func() {
		code = run(ctx, append(append([]string{"relay"}, c.storeArgs...), "-send", "sqs", "-poll", "100ms"), &out, &errOut)
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
		code, o, _ := onceq(append(append([]string{"inspect"}, c.storeArgs...), "-outbox", "dead")...)
		return code == 0 && strings.Contains(o, "-missing") && strings.Contains(o, "reason:")
	})
	cancel()
	wg.Wait()
	if code != 0 || !strings.Contains(out.String(), "sending the "+c.name+" outbox") {
		t.Fatalf("relay: exit %d, %s %s", code, out.String(), errOut.String())
	}
}

// claimComplete is a relayCase's commit over a dedup.Store.
func claimComplete(st dedup.Store) func(t *testing.T, key string, msgs []outbox.Message) {
	return func(t *testing.T, key string, msgs []outbox.Message) {
		t.Helper()
		now := time.Now()
		c, err := st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: key, Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour), Outbox: msgs})
		if err != nil || !c.Acquired {
			t.Fatalf("commit: %+v %v", c, err)
		}
	}
}

func TestRelayPostgresToSQS(t *testing.T) {
	url := testenv.PostgresURL(t)
	q := localSQS(t)
	table := tableName(t)
	if code, _, errOut := onceq("create-table", "-store", "postgres", "-url", url, "-table", table); code != 0 {
		t.Fatalf("create-table: %s", errOut)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	defer conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+table+", "+pgstore.OutboxTable(table)+" CASCADE")
	st, err := pgstore.New(conn, pgstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	relayToSQS(t, q, relayCase{storeArgs: []string{"-store", "postgres", "-postgres-url", url, "-table", table}, commit: claimComplete(st), name: "postgres"})
}

func TestRelayDynamoDBToSQS(t *testing.T) {
	q := localSQS(t)
	table, st := dynamoWithOutbox(t)
	relayToSQS(t, q, relayCase{storeArgs: []string{"-table", table}, commit: claimComplete(st), name: "dynamodb"})
}

// A relay over an outbox table that does not exist stops at once, with an
// error that names that table, on each store that keeps an outbox.
func TestRelayStopsOnMissingOutbox(t *testing.T) {
	localSQS(t)
	pgURL := testenv.PostgresURL(t)
	localAWS(t)
	table := tableName(t)
	for _, c := range []struct {
		store  string
		args   []string
		outbox string
	}{
		{"postgres", []string{"-store", "postgres", "-postgres-url", pgURL}, pgstore.OutboxTable(table)},
		{"dynamodb", nil, dynamostore.OutboxTable(table)},
	} {
		// A bound, should it poll on: it would return 0 at the cancel.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		var out, errOut bytes.Buffer
		code := run(ctx, append(append([]string{"relay"}, c.args...), "-table", table, "-send", "sqs", "-poll", "50ms"), &out, &errOut)
		cancel()
		t.Logf("%s: %s", c.store, errOut.String())
		if code != 1 || !strings.Contains(errOut.String(), c.outbox) || strings.Contains(errOut.String(), "WARN") {
			t.Errorf("%s relay over a missing outbox table: exit %d, %s; want exit 1 naming %s", c.store, code, errOut.String(), c.outbox)
		}
	}
}

// dynamoWithOutbox is a fresh DynamoDB records table with its outbox table,
// made by create-table -outbox, and a store over it.
func dynamoWithOutbox(t *testing.T) (string, *dynamostore.Store) {
	t.Helper()
	db := localAWS(t)
	table := tableName(t)
	if code, _, errOut := onceq("create-table", "-table", table, "-outbox"); code != 0 {
		t.Fatalf("create-table: %s", errOut)
	}
	st, err := dynamostore.New(db, dynamostore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	return table, st
}
