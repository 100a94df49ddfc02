package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/sources/memsource"
)

// A handler returns its business writes instead of making them: the store
// commits them in the same atomic operation as the COMPLETED record, so they
// happen exactly once. A write whose own condition fails (out of stock)
// turns the message into Rejected, and the RejectResponse is what every
// duplicate gets back.
func ExampleResult_writes() {
	stock := map[string]int{"sku-1": 1}
	reserve := func(sku string) memstore.Write {
		return memstore.Write{
			Check: func() error {
				if stock[sku] == 0 {
					return errors.New("out of stock")
				}
				return nil
			},
			Apply: func() { stock[sku]-- },
		}
	}
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		return consumer.Result{
			Response:       []byte("reserved"),
			RejectResponse: []byte("out of stock"),
			Writes:         []dedup.Write{reserve("sku-1")},
		}, nil
	})
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	guard, err := consumer.NewGuard(store, h)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, order := range []string{"order-1", "order-1", "order-2"} {
		o := guard.Process(ctx, &consumer.Message{ID: order, Body: []byte(order),
			Attributes: map[string]string{consumer.IdempotencyKeyAttribute: order}})
		fmt.Printf("%s: %s %q\n", order, o.Kind, o.Response)
	}
	fmt.Println("left in stock:", stock["sku-1"])
	// Output:
	// order-1: processed "reserved"
	// order-1: duplicate "reserved"
	// order-2: rejected "out of stock"
	// left in stock: 0
}

// A Consumer runs a handler over a Source with a pool of workers. Here the
// source is an in-process queue and the store keeps its records in memory;
// in production they would be SQS or Kafka and DynamoDB. The same order
// sent twice runs the handler once.
func ExampleConsumer() {
	queue, err := memsource.NewQueue("orders")
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range []string{"o-1", "o-2", "o-1"} {
		_ = queue.Send(ctx, memsource.Outgoing{Body: []byte(`{"order_id":"` + id + `"}`),
			Attributes: map[string]string{consumer.IdempotencyKeyAttribute: id}})
	}

	var mu sync.Mutex
	runs := 0
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		mu.Lock()
		runs++
		time.Sleep(20 * time.Millisecond)
		mu.Unlock()
		return consumer.Result{Response: []byte("ok")}, nil
	})
	seen := outcomes{want: 3, done: cancel}
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	c, err := consumer.New(queue.Source(), store, h,
		consumer.Concurrency(4), consumer.WithHooks(&seen))
	if err != nil {
		panic(err)
	}
	if err := c.Run(ctx); err != nil { // returns once ctx is cancelled and in-flight work drained
		panic(err)
	}
	fmt.Println("handler runs:", runs)
	fmt.Println("processed:", seen.count(consumer.Processed), "duplicates:", seen.count(consumer.Duplicate))
	fmt.Println("acked:", queue.Stats().Acked)
	// Output:
	// handler runs: 2
	// processed: 2 duplicates: 1
	// acked: 3
}

// outcomes counts outcomes by kind and calls done once it has seen want
// final ones. InFlightElsewhere is not final: the second "o-1" may meet
// the first's lease while it runs, and is then looked at again.
type outcomes struct {
	mu     sync.Mutex
	byKind map[consumer.Kind]int
	total  int
	want   int
	done   func()
}

func (s *outcomes) OnMessageOutcome(_ context.Context, _ *consumer.Message, o consumer.Outcome, _ time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKind == nil {
		s.byKind = map[consumer.Kind]int{}
	}
	s.byKind[o.Kind]++
	if o.Kind == consumer.InFlightElsewhere {
		return
	}
	if s.total++; s.total == s.want {
		s.done()
	}
}

func (s *outcomes) count(k consumer.Kind) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byKind[k]
}

// A Guard gives a receive loop of your own the same guarantee: process
// each message, then do what its outcome's Action says.
func ExampleGuard() {
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		if len(m.Body) == 0 {
			return consumer.Result{}, consumer.Permanent(errors.New("empty order"))
		}
		return consumer.Result{Response: []byte("done")}, nil
	})
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	guard, err := consumer.NewGuard(store, h)
	if err != nil {
		panic(err)
	}
	received := []*consumer.Message{
		{ID: "m-1", Body: []byte("order a")},
		{ID: "m-2", Body: []byte("order a")}, // a redelivery: same body, same default key
		{ID: "m-3", Body: []byte{}, Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "empty"}},
	}
	ctx := context.Background()
	for _, m := range received {
		o := guard.Process(ctx, m)
		switch o.Action() {
		case consumer.Ack:
			fmt.Println(m.ID, "ack:", o.Kind)
		case consumer.Retry:
			fmt.Println(m.ID, "retry after", o.RetryAfter)
		case consumer.DeadLetter:
			fmt.Println(m.ID, "dead letter:", o.Reason())
		}
	}
	// Output:
	// m-1 ack: processed
	// m-2 ack: duplicate
	// m-3 dead letter: empty order
}
