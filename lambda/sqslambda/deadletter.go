package sqslambda

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/sqsattr"
	"github.com/onceq/onceq/sources/sqssource"
)

// errForeign is returned by the dead-letter queue given a message that is
// not an SQS event's record.
var errForeign = errors.New("sqslambda: dead letter: not a record of an SQS event")

// Sender is the part of *sqs.Client that DeadLetterQueue uses.
type Sender interface {
	SendMessage(ctx context.Context, in *awssqs.SendMessageInput, opts ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error)
}

// DeadLetterQueue sends the records the Guard dead-letters to the queue at
// queueURL, through client, as package sqssource's option of the same name
// does: the body and message attributes, plus sqssource.ReasonAttribute and
// sqssource.OriginalIDAttribute; on a FIFO queue the record's MessageGroupId and
// its MessageId as MessageDeduplicationId, so a repeated send within SQS's
// five-minute window adds no second copy. The event source mapping deletes
// the original once the function reports it handled. It is
// WithDeadLetters with this package's SQS DeadLetterer.
func DeadLetterQueue(client Sender, queueURL string) Option {
	return WithDeadLetters(deadLetterQueue(client, queueURL))
}

func deadLetterQueue(client Sender, queueURL string) DeadLetterer {
	fifo := strings.HasSuffix(queueURL, ".fifo")
	return DeadLetterFunc(func(ctx context.Context, m *consumer.Message, reason string) error {
		r, ok := Record(m)
		if !ok {
			return errForeign
		}
		in := &awssqs.SendMessageInput{
			QueueUrl:          aws.String(queueURL),
			MessageBody:       aws.String(r.Body),
			MessageAttributes: deadLetterAttributes(r, reason),
		}
		if fifo {
			group := r.Attributes["MessageGroupId"]
			if group == "" {
				group = r.MessageId
			}
			in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), aws.String(r.MessageId)
		}
		if _, err := client.SendMessage(ctx, in); err != nil {
			return fmt.Errorf("sqslambda: dead-letter %s: %w", r.MessageId, err)
		}
		return nil
	})
}

// maxAttributes is SQS's limit of message attributes per message.
const maxAttributes = 10

func deadLetterAttributes(r *events.SQSMessage, reason string) map[string]sqstypes.MessageAttributeValue {
	out := make(map[string]sqstypes.MessageAttributeValue, len(r.MessageAttributes)+2)
	put := func(k string, v events.SQSMessageAttribute) {
		a := sqstypes.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: v.StringValue}
		if strings.HasPrefix(v.DataType, "Binary") {
			a.StringValue, a.BinaryValue = nil, v.BinaryValue
		}
		out[k] = a
	}
	// Ours must fit in SQS's ten: the idempotency key first, then others
	// while there is room.
	if v, ok := r.MessageAttributes[consumer.IdempotencyKeyAttribute]; ok {
		put(consumer.IdempotencyKeyAttribute, v)
	}
	for k, v := range r.MessageAttributes {
		if k == sqssource.ReasonAttribute || k == sqssource.OriginalIDAttribute || k == consumer.IdempotencyKeyAttribute || len(out) >= maxAttributes-2 {
			continue
		}
		put(k, v)
	}
	out[sqssource.ReasonAttribute] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(sqsattr.Reason(reason, sqsattr.MaxReasonBytes))}
	out[sqssource.OriginalIDAttribute] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(r.MessageId)}
	return out
}
