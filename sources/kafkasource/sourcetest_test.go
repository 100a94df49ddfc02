package kafkasource_test

import (
	"context"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
	"github.com/onceq/onceq/sources/sourcetest"
)

// The conformance suite on kfake, one topic of three partitions and one
// group per subtest, in each ordering mode.
func TestSourcetestKeyOrder(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, harness(consumer.OrderByKey))
}

func TestSourcetestPartitionOrder(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, harness(consumer.OrderByPartition))
}

func TestSourcetestUnordered(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, harness(consumer.Unordered))
}

func harness(o consumer.Ordering) func(t *testing.T) *sourcetest.Harness {
	return func(t *testing.T) *sourcetest.Harness {
		addr := cluster(t)
		topic, dlq, group := topicName(t, "in"), topicName(t, "dlq"), topicName(t, "group")
		createTopic(t, addr, topic, 3)
		createTopic(t, addr, dlq, 1)
		w := writer(t, addr, topic)
		opts := []kafkasource.Option{kafkagroup.DeadLetterTopic(dlq), kafkagroup.Ordering(o)}
		return &sourcetest.Harness{
			Source: newSource(t, addr, group, []string{topic}, opts...),
			Send: func(ctx context.Context, m sourcetest.Outgoing) error {
				return w.WriteMessages(ctx, kgo.Message{Key: []byte(m.Key), Value: m.Body, Headers: headers(m.Attributes)})
			},
			Reopen: func(t *testing.T) consumer.Source { return newSource(t, addr, group, []string{topic}, opts...) },
			DeadLetters: func(ctx context.Context) ([]sourcetest.DeadLetter, error) {
				recs, err := readTopic(ctx, t, addr, dlq)
				if err != nil {
					return nil, err
				}
				out := make([]sourcetest.DeadLetter, 0, len(recs))
				for _, r := range recs {
					out = append(out, grouptest.DeadLetter(r.Value, r.Headers))
				}
				return out, nil
			},
			// A closed member leaves the group, so its partitions go to
			// the next member at once, from the last committed offset.
			Redelivery: 2 * time.Second,
		}
	}
}
