package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// A worker that cannot start says so in one line, what is wrong and what
// to do, exits 1, and takes no message: what was queued is still there,
// never received, and nothing reached the dead-letter queue.
func TestStartFaultsAreOneLine(t *testing.T) {
	q, db, suffix := localAWS(t)
	const body = `{"order_id":"o-1","sku":"sku-0","qty":1}`
	dlq := createQueue(t, q, "start-dlq-"+suffix, nil)

	t.Run("missing idempotency table", func(t *testing.T) {
		queue := createQueue(t, q, "start-table-"+suffix, nil)
		send(t, q, queue, body)
		if err := createExampleTables(t.Context(), db, "inv_"+suffix, "orders_"+suffix, 1, 10); err != nil {
			t.Fatal(err)
		}
		table := "missing_" + suffix
		startFails(t, []string{"-source", "sqs", "-store", "dynamodb", "-sqs-queue-url", queue, "-sqs-dlq-url", dlq,
			"-idempotency-table", table, "-inventory-table", "inv_" + suffix, "-orders-table", "orders_" + suffix},
			`order-worker: the idempotency table "`+table+"\" does not exist: create it with `onceq create-table -table "+table+"` or pass -create-tables")
		neverReceived(t, q, queue, body)
		empty(t, q, dlq)
	})
	t.Run("missing queue", func(t *testing.T) {
		queue := strings.TrimSuffix(dlq, "start-dlq-"+suffix) + "no-such-queue-" + suffix
		startFails(t, []string{"-source", "sqs", "-sqs-queue-url", queue, "-sqs-dlq-url", dlq},
			`order-worker: the SQS queue "`+queue+`" does not exist: create it, or pass the URL of one that exists with -sqs-queue-url`)
		empty(t, q, dlq)
	})
	t.Run("queue without a dead-letter queue", func(t *testing.T) {
		queue := createQueue(t, q, "start-nodlq-"+suffix, nil)
		send(t, q, queue, body)
		startFails(t, []string{"-source", "sqs", "-sqs-queue-url", queue},
			`order-worker: the SQS queue "`+queue+`" has no dead-letter queue: pass -sqs-dlq-url, or give the queue a redrive policy`)
		neverReceived(t, q, queue, body)
	})
}

// startFails runs the worker's entry point and wants exit 1 with exactly
// the line want on stderr.
func startFails(t *testing.T, args []string, want string) {
	t.Helper()
	var out, errOut bytes.Buffer
	exit := make(chan int, 1)
	go func() { exit <- run(append(args, "-metrics-addr", "", "-progress", "0"), &out, &errOut) }()
	var code int
	select {
	case code = <-exit:
	case <-time.After(time.Minute):
		t.Fatalf("still running after a minute; want it to stop at start with %q", want)
	}
	if code != 1 || errOut.String() != want+"\n" || out.Len() != 0 {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 and the one line\n%s", code, out.String(), errOut.String(), want)
	}
}

func send(t *testing.T, q *awssqs.Client, queue, body string) {
	t.Helper()
	if _, err := q.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(body)}); err != nil {
		t.Fatal(err)
	}
}

// neverReceived wants body to be the queue's one message, received now for
// the first time.
func neverReceived(t *testing.T, q *awssqs.Client, queue, body string) {
	t.Helper()
	out, err := q.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(queue), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != body ||
		out.Messages[0].Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)] != "1" {
		t.Fatalf("queue holds %+v; want only %q, never received before", out.Messages, body)
	}
}

func empty(t *testing.T, q *awssqs.Client, queue string) {
	t.Helper()
	out, err := q.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(queue), MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 0 {
		t.Fatalf("%d messages in %s, want none", len(out.Messages), queue)
	}
}
