package sqssource_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/attribute"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/metrictest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/sourcetest"
	"github.com/onceq/onceq/sources/sqssource"
)

func TestOptionsValidated(t *testing.T) {
	t.Parallel()
	c := awssqs.New(awssqs.Options{Region: "us-east-1"})
	for name, opt := range map[string]sqssource.Option{
		"wait too long":       sqssource.WaitTime(21 * time.Second),
		"wait not seconds":    sqssource.WaitTime(1500 * time.Millisecond),
		"no pollers":          sqssource.Pollers(0),
		"visibility too long": sqssource.VisibilityTimeout(13 * time.Hour),
		"visibility sub-sec":  sqssource.VisibilityTimeout(500 * time.Millisecond),
		"flush interval":      sqssource.DeleteFlushInterval(0),
		"delete concurrency":  sqssource.DeleteConcurrency(0),
	} {
		if _, err := sqssource.New(context.Background(), c, "http://x/000000000000/q", opt); !errors.Is(err, sqssource.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := sqssource.New(context.Background(), nil, "http://x/q"); !errors.Is(err, sqssource.ErrInvalidConfig) {
		t.Errorf("nil client: %v", err)
	}
}

// misspelt has OnDeadLeter where HookSQSDeadLetter wants OnSQSDeadLetter.
type misspelt struct{}

func (misspelt) OnDeadLeter(context.Context, string, string) {}

// A hook that implements none of the hook interfaces, a misspelt method's
// for one, is refused rather than never called.
func TestMisspeltHookRefused(t *testing.T) {
	t.Parallel()
	c := awssqs.New(awssqs.Options{Region: "us-east-1"})
	for name, h := range map[string]sqssource.Hook{"misspelt": misspelt{}, "nil": nil} {
		_, err := sqssource.New(context.Background(), c, "http://x/000000000000/q", sqssource.WithHooks(onRetry(func(context.Context, string, retry.Class, error) {}), h))
		if !errors.Is(err, sqssource.ErrInvalidConfig) || !strings.Contains(err.Error(), "hook") {
			t.Errorf("%s hook: New = %v, want ErrInvalidConfig naming the hook", name, err)
		}
	}
}

// New reads visibility, FIFO-ness, retention and the redrive policy, and
// finds the redrive target as its dead-letter queue.
func TestNewReadsQueueAttributes(t *testing.T) {
	t.Parallel()
	c := client(t)
	dlqURL, dlqARN := createQueue(t, c, queueSpec{fifo: true})
	url, _ := createQueue(t, c, queueSpec{fifo: true, visibility: 7 * time.Second, redrive: dlqARN, maxReceive: 4})
	src := newSource(t, c, url)
	if !src.FIFO() || src.Capabilities().Ordering != consumer.OrderByKey {
		t.Errorf("FIFO %v ordering %v: want a FIFO queue ordered by key", src.FIFO(), src.Capabilities().Ordering)
	}
	if d := src.Capabilities().DeliveryTimeout; d != 7*time.Second {
		t.Errorf("DeliveryTimeout %v, want the queue's 7s", d)
	}
	if n := src.MaxReceiveCount(); n != 4 {
		t.Errorf("MaxReceiveCount %d, want 4", n)
	}
	if got := src.DeadLetterQueueURL(); got != dlqURL {
		t.Errorf("DeadLetterQueueURL %q, want the redrive target %q", got, dlqURL)
	}
	if w := src.Capabilities().RedeliveryWindow; w != 4*24*time.Hour {
		t.Errorf("RedeliveryWindow %v, want the default retention of 4 days", w)
	}

	std, _ := createQueue(t, c, queueSpec{})
	s2 := newSource(t, c, std, sqssource.VisibilityTimeout(3*time.Second))
	if s2.FIFO() || s2.Capabilities().Ordering != consumer.Unordered || s2.Capabilities().DeliveryTimeout != 3*time.Second || s2.MaxReceiveCount() != 0 || s2.DeadLetterQueueURL() != "" {
		t.Errorf("standard queue: fifo %v ordering %v timeout %v max receive %d dlq %q",
			s2.FIFO(), s2.Capabilities().Ordering, s2.Capabilities().DeliveryTimeout, s2.MaxReceiveCount(), s2.DeadLetterQueueURL())
	}

	// A FIFO queue's dead letters cannot go to a standard queue.
	if _, err := sqssource.New(context.Background(), c, url, sqssource.DeadLetterQueue(std)); !errors.Is(err, sqssource.ErrInvalidConfig) {
		t.Errorf("FIFO source with standard DLQ: %v, want ErrInvalidConfig", err)
	}
	if _, err := sqssource.New(context.Background(), c, std+"-missing"); err == nil {
		t.Error("New on a missing queue succeeded")
	}
}

// Fields of a received message, binary attributes left out.
func TestMessageMapping(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{fifo: true})
	before := time.Now().Add(-time.Second)
	_, err := c.SendMessage(context.Background(), &awssqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String("hello"),
		MessageGroupId: aws.String("g1"), MessageDeduplicationId: aws.String("d1"),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"s":   {DataType: aws.String("String"), StringValue: aws.String("text")},
			"n":   {DataType: aws.String("Number.int"), StringValue: aws.String("42")},
			"bin": {DataType: aws.String("Binary"), BinaryValue: []byte{1, 2, 3}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	src := newSource(t, c, url)
	msgs, err := src.Receive(testenv.Context(t, 10*time.Second), 10)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d messages, %v", len(msgs), err)
	}
	m := msgs[0]
	if m.ID == "" || string(m.Body) != "hello" || m.OrderingKey != "g1" || m.Deliveries != 1 {
		t.Errorf("message %+v", m)
	}
	if m.Origin != (consumer.Origin{System: "aws_sqs", Destination: url[strings.LastIndexByte(url, '/')+1:]}) {
		t.Errorf("origin %+v", m.Origin)
	}
	if len(m.Attributes) != 2 || m.Attributes["s"] != "text" || m.Attributes["n"] != "42" {
		t.Errorf("attributes %v: want s and n, binary left out", m.Attributes)
	}
	sent, ok := sqssource.SentTime(m)
	if !ok || sent.Before(before) || sent.After(time.Now().Add(time.Second)) {
		t.Errorf("SentTime %v %v", sent, ok)
	}
	if m.ReceivedAt.Before(sent.Add(-time.Second)) {
		t.Errorf("ReceivedAt %v before SentTime %v", m.ReceivedAt, sent)
	}
	if err := src.Ack(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// demandSource is a Source with four pollers over a new queue of 25
// messages, and the log of its ReceiveMessage calls.
func demandSource(t *testing.T) (*sqssource.Source, *receiveLog) {
	t.Helper()
	c, log := recordingClient(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	out := make([]sourcetest.Outgoing, 25)
	for i := range out {
		out[i] = sourcetest.Outgoing{Body: []byte(fmt.Sprintf("m-%02d", i))}
	}
	if err := sendBatch(context.Background(), c, url, false, out); err != nil {
		t.Fatal(err)
	}
	src, err := sqssource.New(context.Background(), c, url, sqssource.WithLogger(testenv.Logger(t)),
		sqssource.Pollers(4), sqssource.WaitTime(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return src, log
}

// Pollers fetch only what a waiting Receive asks for: none before the
// first Receive, no more than it asks, ten at most per call.
func TestReceiveIsDemandDriven(t *testing.T) {
	t.Parallel()
	src, log := demandSource(t)
	if got := log.requests(); len(got) != 0 {
		t.Fatalf("ReceiveMessage calls %v before any Receive, want none", got)
	}
	msgs, err := src.Receive(testenv.Context(t, 10*time.Second), 3)
	if err != nil || len(msgs) == 0 || len(msgs) > 3 {
		t.Fatalf("Receive(3): %d messages, %v", len(msgs), err)
	}
	// A large demand is spread over pollers, ten at most each.
	got := len(msgs)
	for got < 25 {
		msgs, err := src.Receive(testenv.Context(t, 10*time.Second), 25-got)
		if err != nil {
			t.Fatalf("receive after %d: %v", got, err)
		}
		if len(msgs) > 25-got {
			t.Fatalf("Receive(%d) returned %d", 25-got, len(msgs))
		}
		got += len(msgs)
	}
	// Close waits for every poll: the log is then complete.
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	reqs := log.requests()
	if len(reqs) == 0 || reqs[0] > 3 {
		t.Fatalf("ReceiveMessage calls %v: the first asked beyond Receive(3)'s demand", reqs)
	}
	asked := 0
	for _, n := range reqs {
		if n < 1 || n > 10 {
			t.Fatalf("ReceiveMessage calls %v: one asked for %d", reqs, n)
		}
		asked += n
	}
	if asked > 25 {
		t.Errorf("ReceiveMessage calls %v asked for %d messages in all for a demand of 25", reqs, asked)
	}
}

// A poll for less than a batch waits while another is in flight: what
// that one brings serves the waiting Receive, and SQS charges a call of
// one message as it does one of ten.
func TestNoSmallPollBesideAnother(t *testing.T) {
	t.Parallel()
	src, log := demandSource(t)
	msgs, err := src.Receive(testenv.Context(t, 10*time.Second), 12)
	if err != nil || len(msgs) == 0 || len(msgs) > 10 {
		t.Fatalf("Receive(12): %d messages, %v; want those of one poll", len(msgs), err)
	}
	// Close waits for every poll: the log is then complete.
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if reqs := log.requests(); !slices.Equal(reqs, []int{10}) {
		t.Errorf("ReceiveMessage calls %v for Receive(12), want one of ten and none of two beside it", reqs)
	}
	// Only the system attributes the source reads: All would have SQS
	// send, and the SDK decode, more per message.
	for _, names := range log.systemAttributes() {
		slices.Sort(names)
		if want := []string{"ApproximateReceiveCount", "SentTimestamp"}; !slices.Equal(names, want) {
			t.Errorf("MessageSystemAttributeNames %v, want %v", names, want)
		}
	}
}

// Close flushes the acks still being batched.
func TestCloseFlushesAcks(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	out := make([]sourcetest.Outgoing, 37)
	for i := range out {
		out[i] = sourcetest.Outgoing{Body: []byte(fmt.Sprintf("c-%02d", i))}
	}
	if err := sendBatch(context.Background(), c, url, false, out); err != nil {
		t.Fatal(err)
	}
	var failed sync.Map
	src, err := sqssource.New(context.Background(), c, url, sqssource.WithLogger(testenv.Logger(t)), sqssource.WaitTime(2*time.Second),
		sqssource.DeleteFlushInterval(time.Hour), // only full batches and Close flush
		sqssource.WithHooks(onDeleteFailed(func(_ context.Context, id string, err error) { failed.Store(id, err) })))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for n < len(out) {
		msgs, err := src.Receive(testenv.Context(t, 10*time.Second), 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := src.Ack(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
		n += len(msgs)
	}
	if err := src.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	if vis, inflight := depth(t, c, url); vis != 0 || inflight != 0 {
		t.Fatalf("after Close: %d visible, %d in flight; want an empty queue", vis, inflight)
	}
	failed.Range(func(k, v any) bool { t.Errorf("delete of %v failed: %v", k, v); return true })
	if err := src.Close(context.Background()); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// An ack that cannot be carried out is reported to the hook, not fatal;
// after Close an ack is carried out at once.
func TestAckFailuresReported(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	for _, b := range []string{"a", "b"} {
		if err := send(context.Background(), c, url, false, sourcetest.Outgoing{Body: []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var failures []error
	src, err := sqssource.New(context.Background(), c, url, sqssource.WithLogger(testenv.Logger(t)), sqssource.WaitTime(2*time.Second),
		sqssource.WithRetryPolicy(retryFast()),
		sqssource.WithHooks(onDeleteFailed(func(_ context.Context, _ string, err error) {
			mu.Lock()
			failures = append(failures, err)
			mu.Unlock()
		})))
	if err != nil {
		t.Fatal(err)
	}
	msgs := receiveN(t, src, 2)
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// After Close: deleted synchronously.
	if err := src.Ack(context.Background(), msgs[0]); err != nil {
		t.Fatalf("ack after close: %v", err)
	}
	if _, inflight := depth(t, c, url); inflight != 1 {
		t.Fatalf("after a synchronous ack: %d in flight, want 1", inflight)
	}
	// The queue gone, the delete fails for good: reported, not returned.
	if _, err := c.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatal(err)
	}
	src2 := newSource(t, c, mustQueue(t, c), sqssource.WithRetryPolicy(retryFast()))
	if err := src2.Ack(context.Background(), msgs[1]); !errors.Is(err, sqssource.ErrForeignMessage) {
		t.Fatalf("ack on another queue's source: %v, want ErrForeignMessage", err)
	}
	if err := src.Ack(context.Background(), msgs[1]); err == nil {
		t.Fatal("ack on a deleted queue returned no error")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failures) != 0 {
		t.Fatalf("synchronous ack failure also went to the hook: %v", failures)
	}
}

// The asynchronous path: a batch that fails for good goes to the hook.
func TestAsyncDeleteFailureHook(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	if err := send(context.Background(), c, url, false, sourcetest.Outgoing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	src := newSource(t, c, url, sqssource.WithRetryPolicy(retryFast()),
		sqssource.WithHooks(onDeleteFailed(func(_ context.Context, _ string, err error) { failed <- err })))
	m := receiveOne(t, src)
	if _, err := c.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatal(err)
	}
	if err := src.Ack(context.Background(), m); err != nil {
		t.Fatalf("ack is asynchronous, yet returned %v", err)
	}
	select {
	case err := <-failed:
		var qe *types.QueueDoesNotExist
		if !errors.As(err, &qe) {
			t.Errorf("hook got %v, want QueueDoesNotExist", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnSQSDeleteFailed not called")
	}
}

// Extend keeps a message hidden past its visibility timeout; a lost
// delivery is reported as ErrDeliveryLost.
func TestExtend(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 2 * time.Second})
	if err := send(context.Background(), c, url, false, sourcetest.Outgoing{Body: []byte("long")}); err != nil {
		t.Fatal(err)
	}
	extended := make(chan time.Duration, 10)
	src := newSource(t, c, url, sqssource.WaitTime(time.Second), sqssource.WithHooks(onExtended(func(_ context.Context, _ string, d time.Duration) { extended <- d })))
	m := receiveOne(t, src)
	if err := src.Extend(context.Background(), m, 4500*time.Millisecond); err != nil {
		t.Fatalf("extend: %v", err)
	}
	if d := <-extended; d != 5*time.Second {
		t.Errorf("hook saw %v, want 5s (rounded up)", d)
	}
	// Past the 2s timeout, still hidden.
	if got, err := src.Receive(testenv.Context(t, 3500*time.Millisecond), 1); len(got) != 0 {
		t.Fatalf("redelivered while extended: %v %v", got, err)
	}
	// Then it comes back, and the old delivery is gone.
	again, err := src.Receive(testenv.Context(t, 10*time.Second), 1)
	if err != nil || len(again) != 1 || again[0].Deliveries != 2 {
		t.Fatalf("not redelivered after the extension ran out: %v %v", again, err)
	}
	if err := src.Extend(context.Background(), m, 5*time.Second); !errors.Is(err, sqssource.ErrDeliveryLost) {
		t.Errorf("extend of a redelivered message's old delivery: %v, want ErrDeliveryLost", err)
	}
	if err := src.Nack(context.Background(), m, 0); !errors.Is(err, sqssource.ErrDeliveryLost) {
		t.Errorf("nack of the old delivery: %v, want ErrDeliveryLost", err)
	}
	if err := src.Ack(context.Background(), again[0]); err != nil {
		t.Fatal(err)
	}
}

// Without a dead-letter queue DeadLetter refuses and leaves the message.
func TestDeadLetterWithoutQueue(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 1 * time.Second})
	if err := send(context.Background(), c, url, false, sourcetest.Outgoing{Body: []byte("stuck")}); err != nil {
		t.Fatal(err)
	}
	src := newSource(t, c, url, sqssource.WaitTime(time.Second))
	m := receiveOne(t, src)
	if src.Capabilities().DeadLetter {
		t.Fatal("Capabilities declares a dead-letter destination the source lacks")
	}
	err := src.DeadLetter(context.Background(), m, "bad")
	if !errors.Is(err, sqssource.ErrNoDeadLetterQueue) || !errors.Is(err, broker.ErrNoDeadLetterDestination) {
		t.Fatalf("DeadLetter: %v, want ErrNoDeadLetterQueue and broker.ErrNoDeadLetterDestination", err)
	}
	again, err := src.Receive(testenv.Context(t, 10*time.Second), 1)
	if err != nil || len(again) != 1 || string(again[0].Body) != "stuck" {
		t.Fatalf("message not left in the queue: %v %v", again, err)
	}
	_ = src.Ack(context.Background(), again[0])
}

// A dead-letter send that fails is an error, never a success: the hook and
// the ok count do not hear of it, and the original is not deleted.
func TestDeadLetterSendFailure(t *testing.T) {
	t.Parallel()
	c := client(t)
	dlqURL, _ := createQueue(t, c, queueSpec{})
	url, _ := createQueue(t, c, queueSpec{visibility: time.Second})
	if err := send(context.Background(), c, url, false, sourcetest.Outgoing{Body: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	reader, mp := metrictest.Provider(t)
	var announced atomic.Int32
	src := newSource(t, c, url, sqssource.DeadLetterQueue(dlqURL), sqssource.WaitTime(time.Second), sqssource.WithRetryPolicy(retryFast()),
		sqssource.WithMeterProvider(mp), sqssource.WithHooks(onDeadLetter(func(context.Context, string, string) { announced.Add(1) })))
	if _, err := c.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(dlqURL)}); err != nil {
		t.Fatal(err)
	}
	m := receiveOne(t, src)
	err := src.DeadLetter(context.Background(), m, "bad")
	if err == nil {
		t.Fatal("DeadLetter to a deleted queue reported success")
	}
	if errors.Is(err, broker.ErrNoDeadLetterDestination) {
		t.Errorf("a failed send reported as a missing destination: %v", err)
	}
	if n := announced.Load(); n != 0 {
		t.Errorf("OnSQSDeadLetter called %d times for a failed send", n)
	}
	ok := attribute.String("onceq.result", "ok")
	if n := metrictest.Counter(t, reader, "onceq.sqs.dead_letters", ok); n != 0 {
		t.Errorf("%d dead letters counted ok", n)
	}
	if n := metrictest.Counter(t, reader, "onceq.sqs.dead_letters", attribute.String("onceq.result", "error")); n != 1 {
		t.Errorf("%d dead letters counted failed, want 1", n)
	}
	again, err := src.Receive(testenv.Context(t, 10*time.Second), 1)
	if err != nil || len(again) != 1 || string(again[0].Body) != "poison" {
		t.Fatalf("original not left in the queue: %v %v", again, err)
	}
	_ = src.Ack(context.Background(), again[0])
}

// A dead-letter copy on FIFO keeps the group, gets a deduplication ID and
// carries binary attributes unchanged; the hook hears of it.
func TestDeadLetterFIFOCopy(t *testing.T) {
	t.Parallel()
	c := client(t)
	dlqURL, dlqARN := createQueue(t, c, queueSpec{fifo: true})
	url, _ := createQueue(t, c, queueSpec{fifo: true, redrive: dlqARN, maxReceive: 10})
	_, err := c.SendMessage(context.Background(), &awssqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String("poison"),
		MessageGroupId: aws.String("orders-7"), MessageDeduplicationId: aws.String("p1"),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"bin":                            {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2}},
			consumer.IdempotencyKeyAttribute: {DataType: aws.String("String"), StringValue: aws.String("k-1")},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	src := newSource(t, c, url, sqssource.WithHooks(onDeadLetter(func(_ context.Context, _, r string) { reasons = append(reasons, r) })))
	m := receiveOne(t, src)
	reason := "max attempts reached: \x00boom"
	if err := src.DeadLetter(context.Background(), m, reason); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	if len(reasons) != 1 || reasons[0] != reason {
		t.Errorf("OnSQSDeadLetter saw %q", reasons)
	}
	dl, err := readAll(context.Background(), c, dlqURL, 30*time.Second)
	if err != nil || len(dl) != 1 {
		t.Fatalf("dead-letter queue holds %d, %v", len(dl), err)
	}
	d := dl[0]
	a := d.MessageAttributes
	if aws.ToString(d.Body) != "poison" ||
		aws.ToString(a[sqssource.ReasonAttribute].StringValue) != "max attempts reached: ?boom" ||
		aws.ToString(a[sqssource.OriginalIDAttribute].StringValue) != m.ID ||
		aws.ToString(a[consumer.IdempotencyKeyAttribute].StringValue) != "k-1" ||
		string(a["bin"].BinaryValue) != "\x00\x01\x02" ||
		d.Attributes["MessageGroupId"] != "orders-7" ||
		d.Attributes["MessageDeduplicationId"] != m.ID {
		t.Errorf("dead-letter copy: body %q attrs %v system %v", aws.ToString(d.Body), a, d.Attributes)
	}
	if vis, inflight := depth(t, c, url); vis+inflight != 0 {
		t.Errorf("original not deleted: %d visible, %d in flight", vis, inflight)
	}
}

// A Receive that gives up while its poll is in flight leaves the messages
// for the next Receive instead of stranding them.
func TestAbandonedReceiveKeepsMessages(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	src := newSource(t, c, url, sqssource.Pollers(1), sqssource.WaitTime(5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := src.Receive(ctx, 5); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on an empty queue: %v", err)
	}
	// The poll is still waiting on the server; what it brings is kept.
	if err := send(context.Background(), c, url, false, sourcetest.Outgoing{Body: []byte("late")}); err != nil {
		t.Fatal(err)
	}
	msgs, err := src.Receive(testenv.Context(t, 10*time.Second), 5)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "late" {
		t.Fatalf("next Receive: %v %v", msgs, err)
	}
	_ = src.Ack(context.Background(), msgs[0])
}

// A queue deleted under a running source is a configuration fault, and a
// waiting Receive says so rather than wait for messages that cannot come.
func TestReceiveReportsMissingQueue(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{visibility: time.Second})
	src := newSource(t, c, url, sqssource.WaitTime(time.Second))
	if _, err := c.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 15*time.Second)
	_, err := src.Receive(ctx, 1)
	if ctx.Err() != nil {
		t.Fatal("Receive waited out its context over a deleted queue")
	}
	if class := retry.Classify(err); class != retry.Misconfigured {
		t.Fatalf("Receive from a deleted queue: %v (class %v), want a misconfigured error", err, class)
	}
}

// Close ends a Receive that waits at once, and then waits for the long
// poll in flight rather than cancel it (a cancelled poll still hides what
// SQS hands it).
func TestCloseWakesReceive(t *testing.T) {
	t.Parallel()
	c, polling := pollWatchingClient(t)
	url, _ := createQueue(t, c, queueSpec{})
	src, err := sqssource.New(context.Background(), c, url, sqssource.WithLogger(testenv.Logger(t)),
		sqssource.Pollers(1), sqssource.WaitTime(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := src.Receive(context.Background(), 10)
		done <- err
	}()
	<-polling
	closed := make(chan error, 1)
	go func() { closed <- src.Close(context.Background()) }()
	if err := <-done; !errors.Is(err, consumer.ErrSourceClosed) {
		t.Fatalf("waiting Receive ended with %v, want ErrSourceClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// A message sent while a worker stops is not hidden by the stopping
// worker's long poll: the next worker receives it at once, although the
// queue hides a received message for 30s.
func TestStoppingWorkerGivesBackWhatItsPollReceives(t *testing.T) {
	t.Parallel()
	c, polling := pollWatchingClient(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	src, err := sqssource.New(context.Background(), c, url, sqssource.WithLogger(testenv.Logger(t)),
		sqssource.Pollers(1), sqssource.WaitTime(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	received := make(chan error, 1)
	go func() {
		_, err := src.Receive(context.Background(), 10)
		received <- err
	}()
	<-polling // the long poll is on the server, waiting
	closed := make(chan error, 1)
	go func() { closed <- src.Close(testenv.Context(t, 25*time.Second)) }()
	if err := <-received; !errors.Is(err, consumer.ErrSourceClosed) {
		t.Fatalf("waiting Receive ended with %v, want ErrSourceClosed", err)
	}
	// Close has begun; the message arrives during the stop.
	if err := send(context.Background(), c, url, false, sourcetest.Outgoing{Body: []byte("during stop")}); err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	next := newSource(t, client(t), url, sqssource.WaitTime(time.Second))
	msgs, err := next.Receive(testenv.Context(t, 5*time.Second), 1)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "during stop" {
		t.Fatalf("the next worker's Receive: %v %v, want the message sent during the stop", msgs, err)
	}
	_ = next.Ack(context.Background(), msgs[0])
}

// pollWatchingClient is an SQS client whose channel receives once the
// first ReceiveMessage request has been written to the server.
func pollWatchingClient(t *testing.T) (*awssqs.Client, <-chan struct{}) {
	t.Helper()
	c, log := recordingClient(t)
	return c, log.sent
}

// receiveLog records the ReceiveMessage requests of a recordingClient.
type receiveLog struct {
	sent chan struct{} // closed once the first request is written
	once sync.Once
	// written receives once per request written to the server (the
	// first 64; later ones are not signalled).
	written chan struct{}
	mu      sync.Mutex
	maxs    []int // each request's MaxNumberOfMessages, in order
	sys     [][]string
}

// systemAttributes are the MessageSystemAttributeNames of each request.
func (l *receiveLog) systemAttributes() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sys)
}

func (l *receiveLog) requests() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.maxs)
}

// recordingClient is an SQS client that records its ReceiveMessage
// requests.
func recordingClient(t *testing.T) (*awssqs.Client, *receiveLog) {
	t.Helper()
	ep := testenv.SQSEndpoint(t)
	cfg := awstest.Config(t, ep)
	log := &receiveLog{sent: make(chan struct{}), written: make(chan struct{}, 64)}
	w := watchDoer{next: cfg.HTTPClient, log: log}
	return awssqs.NewFromConfig(cfg, func(o *awssqs.Options) {
		o.BaseEndpoint = aws.String(ep)
		o.HTTPClient = w
	}), log
}

type watchDoer struct {
	next aws.HTTPClient
	log  *receiveLog
}

func (w watchDoer) Do(r *http.Request) (*http.Response, error) {
	if r.Header.Get("X-Amz-Target") == "AmazonSQS.ReceiveMessage" && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		var in struct {
			MaxNumberOfMessages         int
			MessageSystemAttributeNames []string
		}
		_ = json.Unmarshal(body, &in)
		w.log.mu.Lock()
		w.log.maxs = append(w.log.maxs, in.MaxNumberOfMessages)
		w.log.sys = append(w.log.sys, in.MessageSystemAttributeNames)
		w.log.mu.Unlock()
		r.Body = &eofSignal{ReadCloser: io.NopCloser(bytes.NewReader(body)), f: func() {
			w.log.once.Do(func() { close(w.log.sent) })
			select {
			case w.log.written <- struct{}{}:
			default:
			}
		}}
	}
	return w.next.Do(r)
}

// eofSignal calls f once its body has been read to the end.
type eofSignal struct {
	io.ReadCloser
	f func()
}

func (b *eofSignal) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.f()
	}
	return n, err
}

func mustQueue(t *testing.T, c *awssqs.Client) string {
	url, _ := createQueue(t, c, queueSpec{})
	return url
}

// A redrive policy whose dead-letter queue cannot be looked up (deleted,
// or in another region) stops New with SQS's answer and the ARN, rather
// than leave a source that seems to have no dead-letter queue at all.
func TestDeadLetterLookupFailureReported(t *testing.T) {
	t.Parallel()
	c := client(t)
	dlqURL, dlqARN := createQueue(t, c, queueSpec{})
	url, _ := createQueue(t, c, queueSpec{redrive: dlqARN, maxReceive: 5})
	if _, err := c.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(dlqURL)}); err != nil {
		t.Fatal(err)
	}
	src, err := sqssource.New(context.Background(), c, url, sqssource.WithLogger(testenv.Logger(t)), sqssource.WaitTime(time.Second))
	if err == nil {
		_ = src.Close(context.Background())
		t.Fatalf("New over a redrive policy whose dead-letter queue is gone succeeded (dead-letter queue %q)", src.DeadLetterQueueURL())
	}
	if errors.Is(err, sqssource.ErrNoDeadLetterQueue) || errors.Is(err, broker.ErrNoDeadLetterDestination) {
		t.Errorf("%v: a failed lookup is not a missing configuration", err)
	}
	var dne *types.QueueDoesNotExist
	if !strings.Contains(err.Error(), dlqARN) || (!errors.As(err, &dne) && !strings.Contains(err.Error(), "NonExistentQueue")) {
		t.Errorf("New: %v, want the ARN %s and SQS's NonExistentQueue", err, dlqARN)
	}
}

// Without credentials, New says so plainly, and it is a configuration
// fault, not an outage to retry.
func TestNoCredentialsSaidPlainly(t *testing.T) {
	t.Parallel()
	url, _ := createQueue(t, client(t), queueSpec{})
	ep := testenv.SQSEndpoint(t)
	c := awssqs.NewFromConfig(awstest.NoCredentialsConfig(t, ep), func(o *awssqs.Options) { o.BaseEndpoint = aws.String(ep) })
	_, err := sqssource.New(context.Background(), c, url, sqssource.WithLogger(testenv.Logger(t)))
	if err == nil || !strings.Contains(err.Error(), "no AWS credentials found") || strings.Contains(err.Error(), "IMDS") {
		t.Fatalf("New without credentials: %v, want \"no AWS credentials found\" and no EC2 metadata chain", err)
	}
	if class := retry.Classify(err); class != retry.Misconfigured {
		t.Errorf("class %v, want misconfigured", class)
	}
}
