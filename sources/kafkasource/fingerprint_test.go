package kafkasource_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/sources/kafkasource"
)

// referenceFingerprint is the key's definition, written plainly: stored
// keys must never change, or duplicates across an upgrade would run again.
func referenceFingerprint(topic, key string, value []byte) string {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(topic), []byte(key), value} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestFingerprintIsStable(t *testing.T) {
	cases := []struct {
		topic, key string
		value      []byte
	}{
		{"orders", "k1", []byte("v")}, {"orders", "", nil}, {"", "", []byte{}},
		{"ab", "c", []byte("d")}, {"a", "bc", []byte("d")}, {"t", "k", make([]byte, 4096)},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		m := &consumer.Message{OrderingKey: c.key, Body: c.value, Origin: consumer.Origin{Destination: c.topic}}
		got, err := kafkasource.Fingerprint(m)
		if err != nil || got != referenceFingerprint(c.topic, c.key, c.value) {
			t.Fatalf("Fingerprint(%q, %q, %d bytes) = %q, %v; want %q", c.topic, c.key, len(c.value), got, err,
				referenceFingerprint(c.topic, c.key, c.value))
		}
		seen[got] = true
	}
	if len(seen) != len(cases) {
		t.Fatalf("%d distinct fingerprints for %d distinct records", len(seen), len(cases))
	}
	m := &consumer.Message{Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "id-7"}}
	if k, _ := kafkasource.Fingerprint(m); k != "id-7" {
		t.Fatalf("header key ignored: %q", k)
	}
}
