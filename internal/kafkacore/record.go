package kafkacore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"

	"github.com/onceq/onceq/broker"
)

// Fingerprint is the idempotency key for Kafka records, for
// the consumer's WithKeyFunc (both sources' default key): the idempotency-key header when present, else the
// SHA-256 of topic, record key and value.
//
// The offset is left out on purpose: a producer that retries a send (a lost
// acknowledgement, no idempotent producer) writes the same record again at a
// new offset, and that copy must be recognised as a duplicate. Two distinct
// events with identical topic, key and value are therefore one event; give
// them an idempotency-key header if they must differ.
func Fingerprint(m *broker.Message) (string, error) {
	if k := m.Attributes[broker.IdempotencyKeyAttribute]; k != "" {
		return k, nil
	}
	h := sha256.New()
	// The length-prefixed topic and key, then the sum, go through one
	// buffer: the key is computed for every record.
	dest, key := m.Origin.Destination, m.Key
	buf := make([]byte, 0, max(8+len(dest)+8+len(key)+8, sha256.Size))
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

// KeyCoversBody reports that Fingerprint hashed m's whole value: m carries
// no idempotency-key header.
func KeyCoversBody(m *broker.Message) bool {
	return m.Attributes[broker.IdempotencyKeyAttribute] == ""
}

// RecordID is a record's message ID: topic/partition/offset.
func RecordID(topic string, partition int32, offset int64) string {
	// Built in one buffer: one allocation per record, not three.
	var room [128]byte
	b := append(room[:0], topic...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(partition), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, offset, 10)
	return string(b)
}

// Headers a dead-letter record carries besides the original's own.
const (
	ReasonHeader            = "onceq-dead-letter-reason"
	OriginalTopicHeader     = "onceq-original-topic"
	OriginalPartitionHeader = "onceq-original-partition"
	OriginalOffsetHeader    = "onceq-original-offset"
)

// Header is one record header, whichever client read it.
type Header struct {
	Key   string
	Value []byte
}

// DeadLetterHeaders returns the headers of a dead-letter record: the
// original's, less any left by an earlier trip to a dead-letter topic,
// then the reason and the origin.
func DeadLetterHeaders(orig []Header, reason, topic string, partition int32, offset int64) []Header {
	out := make([]Header, 0, len(orig)+4)
	for _, h := range orig {
		switch h.Key {
		case ReasonHeader, OriginalTopicHeader, OriginalPartitionHeader, OriginalOffsetHeader:
			continue // a record dead-lettered before: these name this trip
		}
		out = append(out, h)
	}
	return append(out,
		Header{Key: ReasonHeader, Value: []byte(reason)},
		Header{Key: OriginalTopicHeader, Value: []byte(topic)},
		Header{Key: OriginalPartitionHeader, Value: []byte(strconv.Itoa(int(partition)))},
		Header{Key: OriginalOffsetHeader, Value: []byte(strconv.FormatInt(offset, 10))},
	)
}
