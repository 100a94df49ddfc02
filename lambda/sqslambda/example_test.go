package sqslambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/lambda/sqslambda"
)

// An SQS function, called here as the Lambda runtime would call it (in a
// deployed function: lambda.Start(f.Handle), over a DynamoDB store). The
// batch holds an order, a copy of it, a malformed message and one whose
// downstream call fails for now. The copy is answered from the order's
// record, the malformed one goes to the dead-letter destination, and only
// the failed one is reported, to come back after the visibility timeout.
func ExampleNew() {
	var charges atomic.Int32
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		var order struct {
			ID     string `json:"order_id"`
			Amount int    `json:"amount"`
		}
		if err := json.Unmarshal(m.Body, &order); err != nil {
			return consumer.Result{}, consumer.Permanent(errors.New("malformed order"))
		}
		if order.Amount > 1000 {
			return consumer.Result{}, errors.New("payment service unavailable") // worth retrying
		}
		charges.Add(1)
		return consumer.Result{Response: []byte("charged")}, nil
	})
	store, err := memstore.New()
	if err != nil {
		panic(err) // a configuration error
	}
	f, err := sqslambda.New(store, h,
		sqslambda.WithDeadLetters(sqslambda.DeadLetterFunc(
			func(ctx context.Context, m *consumer.Message, reason string) error {
				fmt.Printf("dead letter %s: %s\n", m.ID, reason)
				return nil // handled: not reported
			})))
	if err != nil {
		panic(err) // a configuration error
	}

	const queue = "arn:aws:sqs:eu-west-1:123456789012:orders"
	ev := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m-1", Body: `{"order_id":"o-1","amount":10}`, EventSourceARN: queue},
		{MessageId: "m-2", Body: `{"order_id":"o-1","amount":10}`, EventSourceARN: queue},
		{MessageId: "m-3", Body: `order o-2`, EventSourceARN: queue},
		{MessageId: "m-4", Body: `{"order_id":"o-3","amount":5000}`, EventSourceARN: queue},
	}}
	// The runtime's context carries the invocation's deadline; leases and
	// handlers end before it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := f.Handle(ctx, ev)
	if err != nil {
		panic(err) // the deployment is at fault (consumer.ErrMisconfigured)
	}
	for _, failure := range resp.BatchItemFailures {
		fmt.Println("comes back:", failure.ItemIdentifier)
	}
	fmt.Println("charges:", charges.Load())
	// Output:
	// dead letter m-3: malformed order
	// comes back: m-4
	// charges: 1
}
