package kafkasource_test

import (
	"context"
	"fmt"
	"log"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// A Source reading topics as a member of a consumer group, run by a
// Consumer. Offsets are committed only below records whose record is
// COMPLETED; a record the handler refuses goes to the dead-letter topic.
// (It needs a Kafka cluster, so it is compiled, not run.)
func ExampleNew() {
	ctx := context.Background()
	src, err := kafkasource.New(ctx, []string{"localhost:9092"}, "order-processor", []string{"orders"},
		kafkagroup.Ordering(consumer.OrderByKey), // one record of a key at a time, in offset order
		kafkagroup.DeadLetterTopic("orders.dlq"),
		kafkagroup.OffsetReset(kafkagroup.ResetEarliest))
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

// A kafka-go loop of your own (a Reader's FetchMessage, say) keeps its
// reading and committing and hands each record to a Guard. ToMessage maps
// it as the Source would, and Fingerprint, the Source's default key, must
// be given to the Guard, which has no Source to take it from. Here the
// producer retried a send: the copy at offset 8 is a duplicate.
func ExampleToMessage() {
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("charged")}, nil
	})
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	guard, err := consumer.NewGuard(store, h, consumer.WithSourceKey(kafkasource.Fingerprint, kafkasource.KeyCoversBody))
	if err != nil {
		panic(err)
	}
	fetched := []kgo.Message{
		{Topic: "payments", Partition: 0, Offset: 7, Key: []byte("account-1"), Value: []byte(`{"amount":10}`)},
		{Topic: "payments", Partition: 0, Offset: 8, Key: []byte("account-1"), Value: []byte(`{"amount":10}`)},
	}
	ctx := context.Background()
	for _, r := range fetched {
		m := kafkasource.ToMessage(r, 1)
		o := guard.Process(ctx, m)
		fmt.Println(m.ID, o.Kind, o.Action())
		// Ack: the loop may commit r. Retry: it reads r again after
		// o.RetryAfter. DeadLetter: it produces r elsewhere with o.Reason().
	}
	// Output:
	// payments/0/7 processed ack
	// payments/0/8 duplicate ack
}

// Fingerprint leaves the offset out, so a record written twice by a
// retrying producer keys alike; an idempotency-key header, when present,
// is the key instead.
func ExampleFingerprint() {
	sent := kgo.Message{Topic: "payments", Partition: 2, Offset: 41, Key: []byte("account-1"), Value: []byte(`{"amount":10}`)}
	resent := sent
	resent.Offset = 42
	a, _ := kafkasource.Fingerprint(kafkasource.ToMessage(sent, 1))
	b, _ := kafkasource.Fingerprint(kafkasource.ToMessage(resent, 1))
	fmt.Println("same key:", a == b, "length:", len(a))

	keyed := sent
	keyed.Headers = []kgo.Header{{Key: consumer.IdempotencyKeyAttribute, Value: []byte("payment-9001")}}
	k, _ := kafkasource.Fingerprint(kafkasource.ToMessage(keyed, 1))
	fmt.Println("header key:", k)
	// Output:
	// same key: true length: 64
	// header key: payment-9001
}
