package kafkalambda

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// errForeign is returned by the dead-letter topic given a message that is
// not a Kafka event's record.
var errForeign = errors.New("kafkalambda: dead letter: not a record of a Kafka event")

// Writer is the part of a kafka-go *Writer that DeadLetterTopic uses.
type Writer interface {
	WriteMessages(ctx context.Context, msgs ...kafkago.Message) error
}

// DeadLetterTopic sends the records the Guard dead-letters through w, a
// kafka-go Writer whose Topic is the dead-letter topic, as the Kafka
// sources' option of the same name (kafkagroup.DeadLetterTopic) does: the
// record's key, value and headers, plus kafkagroup.ReasonHeader and the
// original topic, partition and offset headers. It is WithDeadLetters with this package's Kafka
// DeadLetterer.
func DeadLetterTopic(w Writer) Option { return WithDeadLetters(deadLetterTopic(w)) }

func deadLetterTopic(w Writer) DeadLetterer {
	return DeadLetterFunc(func(ctx context.Context, m *consumer.Message, reason string) error {
		r, ok := Record(m)
		if !ok {
			return errForeign
		}
		headers := make([]kafkago.Header, 0, len(r.Headers)+4)
		for _, hs := range r.Headers {
			for k, v := range hs {
				switch k {
				case kafkagroup.ReasonHeader, kafkagroup.OriginalTopicHeader, kafkagroup.OriginalPartitionHeader, kafkagroup.OriginalOffsetHeader:
					continue // a record dead-lettered before: these name this trip
				}
				headers = append(headers, kafkago.Header{Key: k, Value: v})
			}
		}
		headers = append(headers,
			kafkago.Header{Key: kafkagroup.ReasonHeader, Value: []byte(reason)},
			kafkago.Header{Key: kafkagroup.OriginalTopicHeader, Value: []byte(r.Topic)},
			kafkago.Header{Key: kafkagroup.OriginalPartitionHeader, Value: []byte(strconv.FormatInt(r.Partition, 10))},
			kafkago.Header{Key: kafkagroup.OriginalOffsetHeader, Value: []byte(strconv.FormatInt(r.Offset, 10))},
		)
		var key []byte
		if m.OrderingKey != "" {
			key = []byte(m.OrderingKey)
		}
		err := w.WriteMessages(ctx, kafkago.Message{Key: key, Value: m.Body, Headers: headers, Time: r.Timestamp.Time})
		if err != nil {
			return fmt.Errorf("kafkalambda: dead-letter %s: %w", m.ID, err)
		}
		return nil
	})
}
