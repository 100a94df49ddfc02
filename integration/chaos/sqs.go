package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// sqsBroker is a queue and its dead-letter queue on the SQS emulator.
type sqsBroker struct {
	q                *awssqs.Client
	queueURL, dlqURL string
}

func newSQS(ctx context.Context, awsCfg aws.Config, cfg settings, suffix string) (*sqsBroker, error) {
	q := awssqs.NewFromConfig(awsCfg, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(cfg.sqsURL) })
	dlq, err := q.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("chaos-dlq-" + suffix)})
	if err != nil {
		return nil, fmt.Errorf("create DLQ: %w", err)
	}
	// No redrive policy: the broker must never move a valid order aside
	// because a kill made it receive often; the worker decides dead letters.
	main, err := q.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("chaos-" + suffix),
		Attributes: map[string]string{"VisibilityTimeout": strconv.Itoa(max(1, int(cfg.visibility.Seconds())))}})
	if err != nil {
		return nil, fmt.Errorf("create queue: %w", err)
	}
	return &sqsBroker{q: q, queueURL: *main.QueueUrl, dlqURL: *dlq.QueueUrl}, nil
}

func (b *sqsBroker) workerArgs() []string {
	return []string{"-source", "sqs", "-sqs-queue-url", b.queueURL, "-sqs-dlq-url", b.dlqURL}
}

func (b *sqsBroker) close() {}

func (b *sqsBroker) destination() string { return b.queueURL }

func (b *sqsBroker) senderArgs() []string { return []string{"-send", "sqs"} }

// send produces the deliveries in batches of ten from four goroutines.
func (b *sqsBroker) send(ctx context.Context, ds []delivery) error {
	const senders = 4
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		wg.Go(func() {
			for i := s * 10; i < len(ds); i += senders * 10 {
				var entries []sqstypes.SendMessageBatchRequestEntry
				for j := i; j < min(i+10, len(ds)); j++ {
					e := sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), MessageBody: aws.String(ds[j].body)}
					if ds[j].key != "" {
						e.MessageAttributes = map[string]sqstypes.MessageAttributeValue{
							"idempotency-key": {DataType: aws.String("String"), StringValue: aws.String(ds[j].key)}}
					}
					entries = append(entries, e)
				}
				out, err := b.q.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(b.queueURL), Entries: entries})
				if err == nil && len(out.Failed) > 0 {
					err = fmt.Errorf("%d sends failed: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
				}
				if err != nil {
					errs <- fmt.Errorf("send: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// left counts the queue's messages visible, in flight or delayed.
func (b *sqsBroker) left(ctx context.Context) (int, string, error) {
	attrs, err := b.q.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(b.queueURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible, sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		return 0, "", fmt.Errorf("queue attributes: %w", err)
	}
	left := 0
	for _, v := range attrs.Attributes {
		k, _ := strconv.Atoi(v)
		left += k
	}
	return left, fmt.Sprintf("%s visible, %s in flight", attrs.Attributes["ApproximateNumberOfMessages"], attrs.Attributes["ApproximateNumberOfMessagesNotVisible"]), nil
}

// deadLetters drains the DLQ with a long visibility, so nothing is seen twice.
func (b *sqsBroker) deadLetters(ctx context.Context) ([]string, error) {
	var bodies []string
	for emptyPolls := 0; emptyPolls < 2; {
		out, err := b.q.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(b.dlqURL), MaxNumberOfMessages: 10,
			VisibilityTimeout: 600, WaitTimeSeconds: 1})
		if err != nil {
			return nil, fmt.Errorf("receive DLQ: %w", err)
		}
		if len(out.Messages) == 0 {
			emptyPolls++
			continue
		}
		for _, m := range out.Messages {
			bodies = append(bodies, aws.ToString(m.Body))
		}
	}
	return bodies, nil
}
