package kafkasource_test

import (
	"testing"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/sources/kafkasource"
)

func TestToMessage(t *testing.T) {
	km := kgo.Message{Topic: "payments", Partition: 2, Offset: 41, Key: []byte("acct-1"), Value: []byte("v"),
		Headers: []kgo.Header{{Key: consumer.IdempotencyKeyAttribute, Value: []byte("pay-1")}}}
	m := kafkasource.ToMessage(km, 3)
	if m.ID != "payments/2/41" || m.OrderingKey != "acct-1" || string(m.Body) != "v" || m.Deliveries != 3 ||
		m.Origin != (consumer.Origin{System: "kafka", Destination: "payments", Partition: 2, Offset: 41}) {
		t.Fatalf("%+v", m)
	}
	if k, _ := kafkasource.Fingerprint(m); k != "pay-1" {
		t.Fatalf("fingerprint %q, want the idempotency-key header", k)
	}
	km.Headers = nil
	if m := kafkasource.ToMessage(km, 1); m.Attributes != nil {
		t.Fatalf("attributes %v without headers", m.Attributes)
	}
	// Built for every record: the Message, and its ID and key together.
	if n := testing.AllocsPerRun(100, func() { kafkasource.ToMessage(km, 1) }); n != 2 {
		t.Fatalf("ToMessage allocates %v times, want 2", n)
	}
}
