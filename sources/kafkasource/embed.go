package kafkasource

import (
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/kafkacore"
)

// ToMessage turns a record read by an existing kafka-go loop (a Reader's
// FetchMessage) into a broker.Message for the consumer's Guard: headers become
// Attributes, the record key Key, topic/partition/offset the Origin and ID,
// exactly as this package's Source delivers them, so Fingerprint and the
// idempotency-key header work the same either way. attempt counts how
// often the loop has tried this record, from 1.
func ToMessage(m kgo.Message, attempt int) *broker.Message {
	return &broker.Message{
		ID:          kafkacore.RecordID(m.Topic, int32(m.Partition), m.Offset),
		OrderingKey: string(m.Key),
		Body:        m.Value,
		Attributes:  headerAttributes(m.Headers),
		Deliveries:  attempt,
		Origin:      broker.Origin{System: "kafka", Destination: m.Topic, Partition: int32(m.Partition), Offset: m.Offset},
		ReceivedAt:  time.Now(),
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
