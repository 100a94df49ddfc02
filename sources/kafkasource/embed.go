package kafkasource

import (
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/sources/internal/kafkacore"
)

// ToMessage turns a record read by an existing kafka-go loop (a Reader's
// FetchMessage) into a broker.Message for the consumer's Guard: headers become
// Attributes, the record key Key, topic/partition/offset the Origin and ID,
// exactly as this package's Source delivers them, so Fingerprint and the
// idempotency-key header work the same either way. attempt counts how
// often the loop has tried this record, from 1.
func ToMessage(m kgo.Message, attempt int) *broker.Message {
	out := new(broker.Message)
	setMessage(out, m, attempt)
	out.ReceivedAt = time.Now()
	return out
}

// setMessage sets out to ToMessage's message, but for ReceivedAt: the
// Source's deliveries build it in place.
func setMessage(out *broker.Message, m kgo.Message, attempt int) {
	id, key := kafkacore.IDAndKey(m.Topic, int32(m.Partition), m.Offset, m.Key)
	*out = broker.Message{
		ID:          id,
		OrderingKey: key,
		Body:        m.Value,
		Attributes:  headerAttributes(m.Headers),
		Deliveries:  attempt,
		Origin:      broker.Origin{System: "kafka", Destination: m.Topic, Partition: int32(m.Partition), Offset: m.Offset},
	}
}

// headerAttributes maps headers to attributes; a repeated header keeps its
// last value. No headers, no map.
func headerAttributes(hs []kgo.Header) map[string]string {
	if len(hs) == 0 {
		return nil
	}
	attrs := make(map[string]string, len(hs))
	for _, h := range hs {
		attrs[h.Key] = string(h.Value)
	}
	return attrs
}
