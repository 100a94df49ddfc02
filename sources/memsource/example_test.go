package memsource_test

import (
	"context"
	"fmt"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/sources/memsource"
)

// The queue behaves as a broker does towards its Source: a received message
// stays in flight until it is acked, nacked or dead-lettered, and a nacked
// one comes back with its attempt counted. A Consumer makes these calls;
// a test may make them itself, as here.
func ExampleQueue() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	queue, err := memsource.NewQueue("orders", memsource.VisibilityTimeout(time.Minute))
	if err != nil {
		panic(err)
	}
	for _, body := range []string{"order a", "order b", "order c"} {
		if err := queue.Send(ctx, memsource.Outgoing{Body: []byte(body)}); err != nil {
			panic(err)
		}
	}
	src := queue.Source()
	defer src.Close(ctx)

	msgs, err := src.Receive(ctx, 10)
	if err != nil {
		panic(err)
	}
	for _, m := range msgs {
		fmt.Printf("%s %q attempt %d\n", m.ID, m.Body, m.Deliveries)
	}
	_ = src.Ack(ctx, msgs[0])
	_ = src.Nack(ctx, msgs[1], 0) // give it back now
	_ = src.DeadLetter(ctx, msgs[2], "malformed order")
	fmt.Printf("%+v\n", queue.Stats())

	again, err := src.Receive(ctx, 10)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s %q attempt %d\n", again[0].ID, again[0].Body, again[0].Deliveries)
	for _, d := range queue.DeadLetters() {
		fmt.Printf("dead letter %s: %s\n", d.Message.ID, d.Reason)
	}
	// Output:
	// orders-1 "order a" attempt 1
	// orders-2 "order b" attempt 1
	// orders-3 "order c" attempt 1
	// {Ready:1 Delayed:0 InFlight:0 Acked:1 DeadLettered:1}
	// orders-2 "order b" attempt 2
	// dead letter orders-3: malformed order
}

// With Ordering(broker.OrderByKey) the queue is FIFO per key, like an SQS
// FIFO queue's message groups: a key's next message is held back while one
// of it is in flight; other keys are not held back.
func ExampleOrdering() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	queue, err := memsource.NewQueue("payments.fifo", memsource.Ordering(broker.OrderByKey))
	if err != nil {
		panic(err)
	}
	for _, m := range []memsource.Outgoing{
		{Key: "account-1", Body: []byte("debit 10")},
		{Key: "account-1", Body: []byte("debit 20")},
		{Key: "account-2", Body: []byte("credit 5")},
	} {
		_ = queue.Send(ctx, m)
	}
	src := queue.Source()
	defer src.Close(ctx)

	first, _ := src.Receive(ctx, 10)
	for _, m := range first {
		fmt.Printf("%s: %s\n", m.OrderingKey, m.Body)
	}
	fmt.Println("held back:", queue.Stats().Ready)
	for _, m := range first {
		_ = src.Ack(ctx, m)
	}
	next, _ := src.Receive(ctx, 10)
	for _, m := range next {
		fmt.Printf("%s: %s\n", m.OrderingKey, m.Body)
	}
	// Output:
	// account-1: debit 10
	// account-2: credit 5
	// held back: 1
	// account-1: debit 20
}
