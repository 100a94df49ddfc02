package sqssource_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/sources/sourcetest"
	"github.com/onceq/onceq/sources/sqssource"
)

// The conformance suite on a standard and a FIFO queue, each with an
// explicit dead-letter queue and a 2s visibility timeout.
func TestSourcetestStandard(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, harness(false))
}

func TestSourcetestFIFO(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, harness(true))
}

func harness(fifo bool) func(t *testing.T) *sourcetest.Harness {
	return func(t *testing.T) *sourcetest.Harness {
		c := client(t)
		const visibility = 2 * time.Second
		dlqURL, _ := createQueue(t, c, queueSpec{fifo: fifo})
		url, _ := createQueue(t, c, queueSpec{fifo: fifo, visibility: visibility})
		opts := []sqssource.Option{sqssource.DeadLetterQueue(dlqURL), sqssource.WaitTime(2 * time.Second)}
		return &sourcetest.Harness{
			Source: newSource(t, c, url, opts...),
			Send: func(ctx context.Context, m sourcetest.Outgoing) error {
				return send(ctx, c, url, fifo, m)
			},
			Reopen: func(t *testing.T) consumer.Source { return newSource(t, c, url, opts...) },
			DeadLetters: func(ctx context.Context) ([]sourcetest.DeadLetter, error) {
				msgs, err := readAll(ctx, c, dlqURL, time.Second)
				if err != nil {
					return nil, err
				}
				out := make([]sourcetest.DeadLetter, 0, len(msgs))
				for _, m := range msgs {
					d := sourcetest.DeadLetter{Body: []byte(aws.ToString(m.Body)), Attributes: map[string]string{}}
					for k, v := range m.MessageAttributes {
						d.Attributes[k] = aws.ToString(v.StringValue)
					}
					d.Reason = d.Attributes[sqssource.ReasonAttribute]
					out = append(out, d)
				}
				return out, nil
			},
			// A message hidden by a long poll Close cancelled comes back
			// after the visibility timeout.
			Redelivery: visibility,
		}
	}
}
