package franzsource

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/sources/internal/kafkacore"
)

// Fingerprint is the default idempotency key: the idempotency-key header
// when present, else the SHA-256 of topic, record key and value. It is
// sources/kafkasource's Fingerprint, so records read by either client key alike
// and a deployment can switch clients without reprocessing.
func Fingerprint(m *broker.Message) (string, error) { return kafkacore.Fingerprint(m) }

// KeyCoversBody reports that Fingerprint hashed m's value (m has no
// idempotency-key header): the key is derived from the record, not given
// by its producer (consumer.WithSourceKey).
func KeyCoversBody(m *broker.Message) bool { return kafkacore.KeyCoversBody(m) }

// ToMessage turns a record polled by a franz-go loop of your own into a
// broker.Message for the consumer's Guard, exactly as this package's
// Source delivers it: headers become Attributes (a repeated header keeps
// its last value), the record key Key, topic/partition/offset the Origin
// and ID. attempt counts how often the loop has tried this record, from 1.
func ToMessage(r *kgo.Record, attempt int) *broker.Message {
	m := new(broker.Message)
	setMessage(m, r, attempt)
	m.ReceivedAt = time.Now()
	return m
}

// setMessage sets m to ToMessage's message, but for ReceivedAt: the
// Source's deliveries build it in place.
func setMessage(m *broker.Message, r *kgo.Record, attempt int) {
	var attrs map[string]string
	if len(r.Headers) > 0 {
		attrs = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			attrs[h.Key] = string(h.Value)
		}
	}
	id, key := kafkacore.IDAndKey(r.Topic, r.Partition, r.Offset, r.Key)
	*m = broker.Message{
		ID:          id,
		OrderingKey: key,
		Body:        r.Value,
		Attributes:  attrs,
		Deliveries:  attempt,
		Origin:      broker.Origin{System: "kafka", Destination: r.Topic, Partition: r.Partition, Offset: r.Offset},
	}
}
