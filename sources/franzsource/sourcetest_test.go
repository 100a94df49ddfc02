package franzsource_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/sourcetest"
)

// The conformance suite on kfake, one topic of three partitions and one
// group per subtest, in each ordering mode, and under KIP-848's consumer
// protocol.
func TestSourcetestKeyOrder(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, harness(kafkagroup.Ordering(consumer.OrderByKey)))
}

func TestSourcetestPartitionOrder(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, harness(kafkagroup.Ordering(consumer.OrderByPartition)))
}

func TestSourcetestUnordered(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, harness(kafkagroup.Ordering(consumer.Unordered)))
}

func TestSourcetestConsumerProtocol(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, harness(franzsource.GroupProtocol(franzsource.ConsumerProtocol)))
}

func harness(opt franzsource.Option) func(t *testing.T) *sourcetest.Harness {
	return func(t *testing.T) *sourcetest.Harness {
		addr := cluster(t)
		topic, dlq, group := topicName(t, "in"), topicName(t, "dlq"), topicName(t, "group")
		createTopic(t, addr, topic, 3)
		createTopic(t, addr, dlq, 1)
		w := producer(t, addr, topic)
		opts := []franzsource.Option{kafkagroup.DeadLetterTopic(dlq), opt}
		return &sourcetest.Harness{
			Source: newSource(t, addr, group, []string{topic}, opts...),
			Send: func(ctx context.Context, m sourcetest.Outgoing) error {
				return w.ProduceSync(ctx, &kgo.Record{Key: []byte(m.Key), Value: m.Body, Headers: headers(m.Attributes)}).FirstErr()
			},
			Reopen: func(t *testing.T) consumer.Source { return newSource(t, addr, group, []string{topic}, opts...) },
			DeadLetters: func(ctx context.Context) ([]sourcetest.DeadLetter, error) {
				recs, err := readTopic(ctx, t, addr, dlq)
				if err != nil {
					return nil, err
				}
				var out []sourcetest.DeadLetter
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
