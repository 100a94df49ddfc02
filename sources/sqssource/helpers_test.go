package sqssource_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/goleak"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/sourcetest"
	"github.com/onceq/onceq/sources/sqssource"
)

// TestMain checks for leaked goroutines once all tests are done, which
// lets tests run in parallel. Idle keep-alive connections of the SDK's
// HTTP client are not ours to stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// client returns an SQS client for fauxqs, or skips (fails under CI).
func client(t testing.TB) *awssqs.Client {
	t.Helper()
	ep := testenv.SQSEndpoint(t)
	cfg := awstest.Config(t, ep)
	return awssqs.NewFromConfig(cfg, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(ep) })
}

var queueSeq atomic.Int64

// queueName is unique per test and run, within SQS's 80 characters.
func queueName(t testing.TB, fifo bool) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '-'
	}, t.Name())
	suffix := fmt.Sprintf("-%d-%s", queueSeq.Add(1), hex.EncodeToString(b[:]))
	limit := 80 - len(suffix)
	if fifo {
		limit -= len(".fifo")
	}
	if len(name) > limit {
		name = name[len(name)-limit:]
	}
	name += suffix
	if fifo {
		name += ".fifo"
	}
	return name
}

type queueSpec struct {
	fifo       bool
	visibility time.Duration // 0: fauxqs's default, 30s
	redrive    string        // DLQ ARN
	maxReceive int
	maxSize    int // MaximumMessageSize; 0: the emulator's default
}

// createQueue creates a queue that is deleted when the test ends.
func createQueue(t testing.TB, c *awssqs.Client, spec queueSpec) (url, arn string) {
	t.Helper()
	ctx := context.Background()
	attrs := map[string]string{}
	if spec.fifo {
		attrs[string(types.QueueAttributeNameFifoQueue)] = "true"
	}
	if spec.visibility > 0 {
		attrs[string(types.QueueAttributeNameVisibilityTimeout)] = strconv.Itoa(int(spec.visibility / time.Second))
	}
	if spec.maxSize > 0 {
		attrs[string(types.QueueAttributeNameMaximumMessageSize)] = strconv.Itoa(spec.maxSize)
	}
	if spec.redrive != "" {
		attrs[string(types.QueueAttributeNameRedrivePolicy)] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, spec.redrive, spec.maxReceive)
	}
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(queueName(t, spec.fifo)), Attributes: attrs})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	url = aws.ToString(out.QueueUrl)
	t.Cleanup(func() {
		_, _ = c.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	})
	a, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatalf("queue arn: %v", err)
	}
	return url, a.Attributes[string(types.QueueAttributeNameQueueArn)]
}

// newSource opens a Source closed when the test ends. Its long polls wait
// 2s unless opts say otherwise, as Close waits for the one in flight.
func newSource(t testing.TB, c *awssqs.Client, url string, opts ...sqssource.Option) *sqssource.Source {
	t.Helper()
	opts = append([]sqssource.Option{sqssource.WithLogger(testenv.Logger(t)), sqssource.WaitTime(2 * time.Second)}, opts...)
	src, err := sqssource.New(context.Background(), c, url, opts...)
	if err != nil {
		t.Fatalf("sqssource.New: %v", err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	return src
}

// send publishes one message; on FIFO the key is the group.
func send(ctx context.Context, c *awssqs.Client, url string, fifo bool, m sourcetest.Outgoing) error {
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(string(m.Body))}
	if len(m.Attributes) > 0 {
		in.MessageAttributes = make(map[string]types.MessageAttributeValue, len(m.Attributes))
		for k, v := range m.Attributes {
			in.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	if fifo {
		group := m.Key
		if group == "" {
			group = "default"
		}
		var b [16]byte
		_, _ = rand.Read(b[:])
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(hex.EncodeToString(b[:]))
	}
	_, err := c.SendMessage(ctx, in)
	return err
}

// sendBatch publishes many messages, ten per call.
func sendBatch(ctx context.Context, c *awssqs.Client, url string, fifo bool, msgs []sourcetest.Outgoing) error {
	for len(msgs) > 0 {
		n := min(10, len(msgs))
		in := &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url)}
		for i, m := range msgs[:n] {
			e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(m.Body))}
			if len(m.Attributes) > 0 {
				e.MessageAttributes = make(map[string]types.MessageAttributeValue, len(m.Attributes))
				for k, v := range m.Attributes {
					e.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
				}
			}
			if fifo {
				var b [16]byte
				_, _ = rand.Read(b[:])
				e.MessageGroupId = aws.String(m.Key)
				e.MessageDeduplicationId = aws.String(hex.EncodeToString(b[:]))
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

// readAll receives everything visible in a queue (hiding it for hide),
// returning the raw SQS messages.
func readAll(ctx context.Context, c *awssqs.Client, url string, hide time.Duration) ([]types.Message, error) {
	var all []types.Message
	for {
		out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(url),
			MaxNumberOfMessages:         10,
			VisibilityTimeout:           int32(hide / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			return nil, err
		}
		if len(out.Messages) == 0 {
			return all, nil
		}
		all = append(all, out.Messages...)
	}
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

// receiveOne receives one message within 10s, or fails the test.
func receiveOne(t testing.TB, src *sqssource.Source) *broker.Message {
	t.Helper()
	msgs, err := src.Receive(testenv.Context(t, 10*time.Second), 1)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v", err)
	}
	return msgs[0]
}

// receiveN receives until it has n messages, each Receive within 10s, or
// fails the test.
func receiveN(t testing.TB, src *sqssource.Source, n int) []*broker.Message {
	t.Helper()
	var msgs []*broker.Message
	for len(msgs) < n {
		got, err := src.Receive(testenv.Context(t, 10*time.Second), n-len(msgs))
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		msgs = append(msgs, got...)
	}
	return msgs
}

// Hook adapters: a func of the hook's method's type.
type (
	onDeleteFailed func(ctx context.Context, messageID string, err error)
	onExtended     func(ctx context.Context, messageID string, d time.Duration)
	onDeadLetter   func(ctx context.Context, messageID, reason string)
	onRetry        func(ctx context.Context, op string, class retry.Class, err error)
)

func (f onDeleteFailed) OnSQSDeleteFailed(ctx context.Context, id string, err error) { f(ctx, id, err) }
func (f onExtended) OnSQSVisibilityExtended(ctx context.Context, id string, d time.Duration) {
	f(ctx, id, d)
}
func (f onDeadLetter) OnSQSDeadLetter(ctx context.Context, id, reason string) { f(ctx, id, reason) }
func (f onRetry) OnSQSRetry(ctx context.Context, op string, c retry.Class, err error) {
	f(ctx, op, c, err)
}

// retryFast gives up quickly, for tests of failures.
func retryFast() retry.Policy {
	return retry.Policy{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, MaxAttempts: 3}
}
