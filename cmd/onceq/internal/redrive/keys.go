package redrive

import (
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
)

// KeyFunc is the stored key of a dead letter's message: what the
// consumer that processed it claimed.
type KeyFunc func(m *broker.Message) (string, error)

// BodyKeys is the consumer's default key of a KeyFromBody source (SQS)
// under namespace: the IdempotencyKeyAttribute when present, else the
// body's hash.
func BodyKeys(namespace string) KeyFunc {
	return func(m *broker.Message) (string, error) {
		if k, ok := m.Attributes[broker.IdempotencyKeyAttribute]; ok {
			return dedup.Key(namespace, k)
		}
		key, _, err := dedup.BodyKey(namespace, m.Body)
		return key, err
	}
}

// RecordKeys is the consumer's default key of a KeyFromRecord source
// (Kafka) under namespace: broker.Fingerprint, of the topic the message
// was read from (its Origin.Destination), its record key and its value.
func RecordKeys(namespace string) KeyFunc {
	return func(m *broker.Message) (string, error) {
		fp, err := broker.Fingerprint(m)
		if err != nil {
			return "", err
		}
		if broker.FingerprintCoversBody(m) {
			return dedup.DerivedKey(namespace, fp)
		}
		return dedup.Key(namespace, fp)
	}
}
