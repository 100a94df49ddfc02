package broker

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Fingerprint is the key of KeyFromRecord: the IdempotencyKeyAttribute
// when present, else the SHA-256 of the Destination, the OrderingKey and
// the body (Kafka: topic, record key and value).
//
// The offset is left out on purpose: a producer that retries a send (a lost
// acknowledgement, no idempotent producer) writes the same record again at a
// new offset, and that copy must be recognised as a duplicate. Two distinct
// events with identical topic, key and value are therefore one event; give
// them an idempotency-key header if they must differ.
func Fingerprint(m *Message) (string, error) {
	if k := m.Attributes[IdempotencyKeyAttribute]; k != "" {
		return k, nil
	}
	h := sha256.New()
	// The length-prefixed topic and key, then the sum, go through one
	// buffer, on the stack for the usual topic and key: the key is
	// computed for every record.
	dest, key := m.Origin.Destination, m.OrderingKey
	var room [256]byte
	buf := room[:0]
	// Length prefixes keep ("ab","c") and ("a","bc") apart.
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(dest)))
	buf = append(buf, dest...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(key)))
	buf = append(buf, key...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(m.Body)))
	h.Write(buf)
	h.Write(m.Body)
	sum := h.Sum(buf[:0])
	var hx [2 * sha256.Size]byte
	hex.Encode(hx[:], sum)
	return string(hx[:]), nil
}

// FingerprintCoversBody reports that Fingerprint hashed m's whole body: m
// carries no IdempotencyKeyAttribute.
func FingerprintCoversBody(m *Message) bool {
	return m.Attributes[IdempotencyKeyAttribute] == ""
}
