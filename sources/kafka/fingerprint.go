package kafka

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/onceq/onceq/consumer"
)

// Fingerprint is the idempotency key for Kafka records, for
// consumer.WithKeyFunc: the idempotency-key header when present, else the
// SHA-256 of topic, record key and value.
//
// The offset is left out on purpose: a producer that retries a send (a lost
// acknowledgement, no idempotent producer) writes the same record again at a
// new offset, and that copy must be recognised as a duplicate. Two distinct
// events with identical topic, key and value are therefore one event; give
// them an idempotency-key header if they must differ.
func Fingerprint(m *consumer.Message) (string, error) {
	if k := m.Attributes[consumer.IdempotencyKeyAttribute]; k != "" {
		return k, nil
	}
	h := sha256.New()
	var n [8]byte
	// Length prefixes keep ("ab","c") and ("a","bc") apart.
	for _, part := range [][]byte{[]byte(m.Origin.Destination), []byte(m.Key), m.Body} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
