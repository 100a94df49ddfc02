package sqsdynamo_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/goleak"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/sourcetest"
	"github.com/onceq/onceq/sources/sqssource"
)

// TestMain checks for leaked goroutines. Idle keep-alive connections of
// the SDK's HTTP client are not ours to stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// client returns an SQS client for the emulator, or skips (fails under CI).
func client(t testing.TB) *awssqs.Client {
	t.Helper()
	ep := testenv.SQSEndpoint(t)
	return awssqs.NewFromConfig(awstest.Config(t, ep), func(o *awssqs.Options) { o.BaseEndpoint = aws.String(ep) })
}

type queueSpec struct {
	visibility time.Duration
}

// createQueue creates a standard queue, unique per call, that is deleted
// when the test ends.
func createQueue(t testing.TB, c *awssqs.Client, spec queueSpec) (url, arn string) {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	attrs := map[string]string{string(types.QueueAttributeNameVisibilityTimeout): strconv.Itoa(int(spec.visibility / time.Second))}
	out, err := c.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String("sqsdynamo-" + hex.EncodeToString(b[:])), Attributes: attrs})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	url = aws.ToString(out.QueueUrl)
	t.Cleanup(func() {
		_, _ = c.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	})
	return url, ""
}

// newSource opens a Source closed when the test ends; its long polls wait
// 2s, as Close waits for the one in flight.
func newSource(t testing.TB, c *awssqs.Client, url string) *sqssource.Source {
	t.Helper()
	src, err := sqssource.New(context.Background(), c, url, sqssource.WithLogger(testenv.Logger(t)), sqssource.WaitTime(2*time.Second))
	if err != nil {
		t.Fatalf("sqssource.New: %v", err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	return src
}

// sendBatch publishes msgs to a standard queue, ten per call.
func sendBatch(ctx context.Context, c *awssqs.Client, url string, _ bool, msgs []sourcetest.Outgoing) error {
	for len(msgs) > 0 {
		n := min(10, len(msgs))
		in := &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url)}
		for i, m := range msgs[:n] {
			e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(m.Body)),
				MessageAttributes: map[string]types.MessageAttributeValue{}}
			for k, v := range m.Attributes {
				e.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
			}
			in.Entries = append(in.Entries, e)
		}
		out, err := c.SendMessageBatch(ctx, in)
		if err != nil {
			return err
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("send batch: %d failed: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
		}
		msgs = msgs[n:]
	}
	return nil
}

// depth is ApproximateNumberOfMessages and ...NotVisible.
func depth(t testing.TB, c *awssqs.Client, url string) (visible, inFlight int) {
	t.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		t.Fatalf("queue depth: %v", err)
	}
	visible, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	inFlight, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return visible, inFlight
}

// outcomes counts outcomes by kind.
type outcomes struct {
	mu    sync.Mutex
	kinds map[consumer.Kind]int
}

func (o *outcomes) OnMessageOutcome(_ context.Context, _ *consumer.Message, out consumer.Outcome, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.kinds == nil {
		o.kinds = map[consumer.Kind]int{}
	}
	o.kinds[out.Kind]++
}

func (o *outcomes) settled() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.kinds[consumer.Processed] + o.kinds[consumer.Duplicate]
}

// withDuplicateSends returns unique orders followed by dups of them sent
// again (the same idempotency key, a new SQS message): every stride-th
// order, wrapping around.
func withDuplicateSends(unique, dups, stride int) []sourcetest.Outgoing {
	msgs := make([]sourcetest.Outgoing, 0, unique+dups)
	for i := range unique {
		key := fmt.Sprintf("order-%05d", i)
		msgs = append(msgs, sourcetest.Outgoing{Body: []byte(`{"order":"` + key + `"}`),
			Attributes: map[string]string{consumer.IdempotencyKeyAttribute: key}})
	}
	for i := range dups {
		msgs = append(msgs, msgs[(i*stride)%unique])
	}
	return msgs
}

// runUntilSettled runs cons until seen has counted total messages processed
// or found duplicate, then stops it and logs the throughput.
func runUntilSettled(t *testing.T, cons *consumer.Consumer, seen *outcomes, total int, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	var stopped atomic.Bool
	stop := func() error {
		if stopped.Swap(true) {
			return nil
		}
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(60 * time.Second):
			return errors.New("consumer did not stop within 60s")
		}
	}
	t.Cleanup(func() { _ = stop() })
	start := time.Now()
	testenv.Eventually(t, within, "not every message was settled", func() bool { return seen.settled() >= total })
	took := time.Since(start)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("%d messages in %v (%.0f msg/s); outcomes %v", total, took, float64(total)/took.Seconds(), seen.kinds)
}
