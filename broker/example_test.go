package broker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/sources/memsource"
)

// deadLetterLog is a Source decorator. Embedding broker.Source forwards
// every method it does not override, Capabilities among them, so the
// consumer sees the wrapped Source's ordering, delivery timeout and
// dead-letter destination, exactly as if it were not wrapped.
type deadLetterLog struct {
	broker.Source
	mu      sync.Mutex
	reasons []string
}

func (s *deadLetterLog) DeadLetter(ctx context.Context, m *broker.Message, reason string) error {
	err := s.Source.DeadLetter(ctx, m, reason)
	if err == nil {
		s.mu.Lock()
		s.reasons = append(s.reasons, m.ID+": "+reason)
		s.mu.Unlock()
	}
	return err
}

// stopAfter cancels the run once it has seen n outcomes.
type stopAfter struct {
	mu     sync.Mutex
	n      int
	cancel func()
}

func (s *stopAfter) OnMessageOutcome(context.Context, *consumer.Message, consumer.Outcome, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n--; s.n == 0 {
		s.cancel()
	}
}

// A decorator keeps every guarantee of the Source it wraps: the consumer
// accepts it because the in-process queue's Capabilities say it has a
// dead-letter destination, and the message the handler refuses reaches
// that destination through the decorator.
func ExampleSource() {
	queue, err := memsource.NewQueue("orders")
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = queue.Send(ctx, memsource.Outgoing{Body: []byte(`{"order_id":"o-1"}`)})
	_ = queue.Send(ctx, memsource.Outgoing{Body: []byte(`not json`)})

	src := &deadLetterLog{Source: queue.Source()}
	caps := src.Capabilities()
	fmt.Println("dead-letter destination:", caps.DeadLetter, "delivery timeout:", caps.DeliveryTimeout)

	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		if m.Body[0] != '{' {
			return consumer.Result{}, consumer.Permanent(errors.New("not a JSON object"))
		}
		return consumer.Result{Response: []byte("ok")}, nil
	})
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	c, err := consumer.New(src, store, h, consumer.WithHooks(&stopAfter{n: 2, cancel: cancel}))
	if err != nil {
		panic(err)
	}
	if err := c.Run(ctx); err != nil {
		panic(err)
	}
	fmt.Println("dead letters:", src.reasons)
	fmt.Println("acked:", queue.Stats().Acked)
	// Output:
	// dead-letter destination: true delivery timeout: 30s
	// dead letters: [orders-2: not a JSON object]
	// acked: 1
}
