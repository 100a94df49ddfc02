package kafkasource

import (
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/sources/internal/kafkacore"
)

// Fingerprint is the idempotency key for Kafka records, for the consumer's
// WithKeyFunc: the idempotency-key header when present, else the SHA-256
// of topic, record key and value. The franz source computes the same key,
// so a deployment can move between the two without reprocessing.
//
// The offset is left out on purpose: a producer that retries a send (a lost
// acknowledgement, no idempotent producer) writes the same record again at a
// new offset, and that copy must be recognised as a duplicate. Two distinct
// events with identical topic, key and value are therefore one event; give
// them an idempotency-key header if they must differ.
func Fingerprint(m *broker.Message) (string, error) { return kafkacore.Fingerprint(m) }

// KeyCoversBody reports that Fingerprint hashed m's value (m has no
// idempotency-key header): the key is derived from the record, not given
// by its producer (consumer.WithSourceKey).
func KeyCoversBody(m *broker.Message) bool { return kafkacore.KeyCoversBody(m) }
