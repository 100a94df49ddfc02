package payload_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/payload"
)

// Orders keyed by their order.id, where an order re-serialized by another
// producer is still the same order.
func Example() {
	handler := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("charged")}, nil
	})
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	guard, err := consumer.NewGuard(store, handler,
		consumer.WithKeyFunc(payload.JSONKey("order.id")),
		consumer.WithPayloadHash(payload.CanonicalJSON),
		consumer.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	for _, body := range []string{
		`{"order":{"id":"A-1"},"total":12.50}`,
		`{ "total": 12.5, "order": { "id": "A-1" } }`, // the same order, re-serialized
		`{"order":{"id":"A-1"},"total":99}`,           // the same key, another order
		`{"total":5}`,                                 // no key
	} {
		o := guard.Process(context.Background(), &consumer.Message{Body: []byte(body)})
		fmt.Println(o.Kind, o.Action())
	}
	// Output:
	// processed ack
	// duplicate ack
	// key_reuse dead_letter
	// dead_lettered dead_letter
}

func ExampleJSONKey() {
	byOrder := payload.JSONKey("order.id")
	byLine := payload.JSONKey("order.id", "line")
	m := &consumer.Message{Body: []byte(`{"order":{"id":"A-1"},"line":2}`)}
	k1, _ := byOrder(m)
	k2, _ := byLine(m)
	fmt.Println(k1)
	fmt.Println(k2)

	_, err := byOrder(&consumer.Message{Body: []byte(`{"order":{}}`)})
	fmt.Println(errors.Is(err, payload.ErrNoKey), err)
	// Output:
	// A-1
	// ["A-1",2]
	// true payload: key path "order.id": no key value (missing, null or empty)
}
