package sharesource_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/sources/franzsource/sharesource"
	"github.com/onceq/onceq/sources/sourcetest"
)

// The conformance suite on kfake: one topic of three partitions and one
// share group per subtest.
func TestSourcetest(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, func(t *testing.T) *sourcetest.Harness {
		addr := cluster(t)
		topic, dlq, group := topicName(t, "in"), topicName(t, "dlq"), topicName(t, "group")
		createTopic(t, addr, topic, 3)
		createTopic(t, addr, dlq, 1)
		w := producer(t, addr, topic)
		opts := []sharesource.Option{sharesource.DeadLetterTopic(dlq)}
		return &sourcetest.Harness{
			Source: newSource(t, addr, group, topic, opts...),
			Send: func(ctx context.Context, m sourcetest.Outgoing) error {
				return w.ProduceSync(ctx, &kgo.Record{Key: []byte(m.Key), Value: m.Body, Headers: headers(m.Attributes)}).FirstErr()
			},
			Reopen: func(t *testing.T) consumer.Source { return newSource(t, addr, group, topic, opts...) },
			DeadLetters: func(ctx context.Context) ([]sourcetest.DeadLetter, error) {
				recs, err := readTopic(ctx, addr, dlq)
				if err != nil {
					return nil, err
				}
				var out []sourcetest.DeadLetter
				for _, r := range recs {
					out = append(out, grouptest.DeadLetter(r.Value, r.Headers))
				}
				return out, nil
			},
			// A closed member's records are released at once; a lost one's
			// when its lock runs out.
			Redelivery: testLock,
		}
	})
}
