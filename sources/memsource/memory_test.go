package memsource_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/sources/memsource"
	"github.com/onceq/onceq/sources/sourcetest"
)

func harness(opts ...memsource.Option) func(t *testing.T) *sourcetest.Harness {
	return func(t *testing.T) *sourcetest.Harness {
		q := memsourcetest.NewQueue(t, t.Name(), append([]memsource.Option{memsource.VisibilityTimeout(2 * time.Second)}, opts...)...)
		return &sourcetest.Harness{
			Source: q.Source(),
			Send: func(ctx context.Context, m sourcetest.Outgoing) error {
				return q.Send(ctx, memsource.Outgoing{Key: m.Key, Body: m.Body, Attributes: m.Attributes})
			},
			Reopen: func(*testing.T) consumer.Source { return q.Source() },
			DeadLetters: func(context.Context) ([]sourcetest.DeadLetter, error) {
				var out []sourcetest.DeadLetter
				for _, d := range q.DeadLetters() {
					out = append(out, sourcetest.DeadLetter{Body: d.Message.Body, Attributes: d.Message.Attributes, Reason: d.Reason})
				}
				return out, nil
			},
			Redelivery: 2 * time.Second,
		}
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, harness())
}

func TestConformanceFIFO(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, harness(memsource.Ordering(consumer.OrderByKey)))
}

func TestVisibilityExpiryRedelivers(t *testing.T) {
	t.Parallel()
	q := memsourcetest.NewQueue(t, "vis", memsource.VisibilityTimeout(200*time.Millisecond))
	src := q.Source()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = q.Send(ctx, memsource.Outgoing{Body: []byte("x")})
	first, err := src.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	second, err := src.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if second[0].Deliveries != 2 {
		t.Fatalf("attempt %d, want 2", second[0].Deliveries)
	}
	if err := src.Ack(ctx, first[0]); err == nil {
		t.Fatal("ack of an expired delivery succeeded")
	}
	if err := src.Ack(ctx, second[0]); err != nil {
		t.Fatal(err)
	}
	if s := q.Stats(); s.Acked != 1 || s.InFlight != 0 || s.Ready != 0 {
		t.Fatalf("stats %+v", s)
	}
}
