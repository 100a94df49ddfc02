package awslambda

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/sqsattr"
	"github.com/onceq/onceq/sources/kafkasource"
	"github.com/onceq/onceq/sources/sqssource"
)

// DeadLetterer sends a record the Guard dead-lettered to a dead-letter
// destination. m.Handle holds the Lambda record ([SQSRecord],
// [KafkaRecord]). When DeadLetter returns nil the record counts as handled
// and is not reported; an error keeps it with the event source.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, m *consumer.Message, reason string) error
}

// DeadLetterFunc adapts a function to DeadLetterer.
type DeadLetterFunc func(ctx context.Context, m *consumer.Message, reason string) error

// DeadLetter calls f.
func (f DeadLetterFunc) DeadLetter(ctx context.Context, m *consumer.Message, reason string) error {
	return f(ctx, m, reason)
}

// errForeign is returned by an adapter given a message of the other source.
var errForeign = errors.New("awslambda: dead letter: not a record of this source")

// SQSSender is the part of *sqssource.Client that SQSQueue uses.
type SQSSender interface {
	SendMessage(ctx context.Context, in *awssqs.SendMessageInput, opts ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error)
}

// SQSQueue dead-letters SQS records to the queue at queueURL, as package
// sqs does: the body and message attributes, plus sqssource.ReasonAttribute and
// sqssource.OriginalIDAttribute; on a FIFO queue the record's MessageGroupId and
// its MessageId as MessageDeduplicationId, so a repeated send within SQS's
// five-minute window adds no second copy. The event source mapping deletes
// the original once the function reports it handled.
func SQSQueue(client SQSSender, queueURL string) DeadLetterer {
	fifo := strings.HasSuffix(queueURL, ".fifo")
	return DeadLetterFunc(func(ctx context.Context, m *consumer.Message, reason string) error {
		r, ok := SQSRecord(m)
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
			return fmt.Errorf("awslambda: dead-letter %s: %w", r.MessageId, err)
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

// KafkaWriter is the part of a kafka-go *Writer that KafkaTopic uses.
type KafkaWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafkago.Message) error
}

// KafkaTopic dead-letters Kafka records through w, a kafka-go Writer whose
// Topic is the dead-letter topic, as package kafka does: the record's key,
// value and headers, plus kafkasource.ReasonHeader and the original topic,
// partition and offset headers.
func KafkaTopic(w KafkaWriter) DeadLetterer {
	return DeadLetterFunc(func(ctx context.Context, m *consumer.Message, reason string) error {
		r, ok := KafkaRecord(m)
		if !ok {
			return errForeign
		}
		headers := make([]kafkago.Header, 0, len(r.Headers)+4)
		for _, hs := range r.Headers {
			for k, v := range hs {
				switch k {
				case kafkasource.ReasonHeader, kafkasource.OriginalTopicHeader, kafkasource.OriginalPartitionHeader, kafkasource.OriginalOffsetHeader:
					continue // a record dead-lettered before: these name this trip
				}
				headers = append(headers, kafkago.Header{Key: k, Value: v})
			}
		}
		headers = append(headers,
			kafkago.Header{Key: kafkasource.ReasonHeader, Value: []byte(reason)},
			kafkago.Header{Key: kafkasource.OriginalTopicHeader, Value: []byte(r.Topic)},
			kafkago.Header{Key: kafkasource.OriginalPartitionHeader, Value: []byte(strconv.FormatInt(r.Partition, 10))},
			kafkago.Header{Key: kafkasource.OriginalOffsetHeader, Value: []byte(strconv.FormatInt(r.Offset, 10))},
		)
		var key []byte
		if m.OrderingKey != "" {
			key = []byte(m.OrderingKey)
		}
		err := w.WriteMessages(ctx, kafkago.Message{Key: key, Value: m.Body, Headers: headers, Time: r.Timestamp.Time})
		if err != nil {
			return fmt.Errorf("awslambda: dead-letter %s: %w", m.ID, err)
		}
		return nil
	})
}
