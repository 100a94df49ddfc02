package franzsource_test

import (
	"context"
	"fmt"
	"log"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// A Source reading topics as a member of a consumer group with cooperative
// rebalancing, run by a Consumer. Offsets are committed only below records
// whose record is COMPLETED; a record the handler refuses goes to the
// dead-letter topic. (It needs a Kafka cluster, so it is compiled, not
// run.)
func ExampleNew() {
	ctx := context.Background()
	src, err := franzsource.New(ctx, []string{"localhost:9092"}, "order-processor", []string{"orders"},
		kafkagroup.Ordering(consumer.OrderByKey), // one record of a key at a time, in offset order
		kafkagroup.DeadLetterTopic("orders.dlq"),
		franzsource.GroupProtocol(franzsource.Cooperative))
	if err != nil {
		log.Fatal(err) // a typed error: a bad option, a missing topic, an unreachable cluster
	}
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("ok")}, nil
	})
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	c, err := consumer.New(src, store, h, consumer.Concurrency(16))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A franz-go poll loop of your own keeps its polling and committing and
// hands each record to a Guard. ToMessage maps it as the Source would, and
// Fingerprint, the Source's default key, must be given to the Guard, which
// has no Source to take it from. Here the producer retried a send: the
// copy at offset 8 is a duplicate.
func ExampleToMessage() {
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("charged")}, nil
	})
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	guard, err := consumer.NewGuard(store, h, consumer.WithSourceKey(franzsource.Fingerprint, franzsource.KeyCoversBody))
	if err != nil {
		panic(err)
	}
	polled := []*kgo.Record{ // what fetches.EachRecord would yield
		{Topic: "payments", Partition: 0, Offset: 7, Key: []byte("account-1"), Value: []byte(`{"amount":10}`)},
		{Topic: "payments", Partition: 0, Offset: 8, Key: []byte("account-1"), Value: []byte(`{"amount":10}`)},
	}
	ctx := context.Background()
	for _, r := range polled {
		m := franzsource.ToMessage(r, 1)
		o := guard.Process(ctx, m)
		fmt.Println(m.ID, o.Kind, o.Action())
		// Ack: the loop may commit r. Retry: it reads r again after
		// o.RetryAfter. DeadLetter: it produces r elsewhere with o.Reason().
	}
	// Output:
	// payments/0/7 processed ack
	// payments/0/8 duplicate ack
}

// Fingerprint is kafkasource's: a record read by either client gets the
// same key, so a deployment can switch clients and keep its records. It
// leaves the offset out, so a copy written by a retrying producer keys
// alike.
func ExampleFingerprint() {
	rec := &kgo.Record{Topic: "payments", Partition: 2, Offset: 41, Key: []byte("account-1"), Value: []byte(`{"amount":10}`)}
	resent := *rec
	resent.Offset = 42
	a, _ := franzsource.Fingerprint(franzsource.ToMessage(rec, 1))
	b, _ := franzsource.Fingerprint(franzsource.ToMessage(&resent, 1))
	fmt.Println("retried send, same key:", a == b)
	// Output:
	// retried send, same key: true
}
