package kafkacore

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/onceq/onceq/broker"
)

// Fingerprint is the idempotency key for Kafka records (both sources'
// default key, broker.KeyFromRecord): see broker.Fingerprint.
func Fingerprint(m *broker.Message) (string, error) { return broker.Fingerprint(m) }

// KeyCoversBody reports that Fingerprint hashed m's whole value: m carries
// no idempotency-key header.
func KeyCoversBody(m *broker.Message) bool { return broker.FingerprintCoversBody(m) }

// RecordID is a record's message ID: topic/partition/offset.
func RecordID(topic string, partition int32, offset int64) string {
	id, _ := IDAndKey(topic, partition, offset, nil)
	return id
}

// IDAndKey are a record's message ID (RecordID) and its key as a string,
// the Message's ID and OrderingKey, built in one buffer: one allocation
// per record for both, not four.
func IDAndKey(topic string, partition int32, offset int64, key []byte) (id, orderingKey string) {
	var room [128]byte
	b := append(room[:0], topic...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(partition), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, offset, 10)
	n := len(b)
	s := string(append(b, key...))
	return s[:n], s[n:]
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

// DefaultMaxMessageBytes is Kafka's max.message.bytes when a topic's is
// not known; MaxReasonBytes bounds the reason header, so that a long error
// chain cannot eat the record's room.
const (
	DefaultMaxMessageBytes = 1048588
	MaxReasonBytes         = 4096
)

// What a record batch of one record adds to its key, value and headers, at
// most: the v2 batch header (61 bytes, what a broker measures against
// max.message.bytes) and the record's own length, attributes, timestamp
// and offset deltas, key and value lengths and header count as varints;
// then two varint lengths per header.
const (
	recordOverhead = 61 + 5 + 1 + 10 + 5 + 5 + 5 + 5
	headerOverhead = 10
)

// DefaultMaxInFlightBytes bounds, by default, the records a source holds
// fetched and not done, over all its partitions: a quarter of a GiB, a
// small share of a modest worker's memory, and room for 256 records of a
// megabyte.
const DefaultMaxInFlightBytes = 256 << 20

// RecordSize is the most a batch of one record of these sizes takes.
func RecordSize(keyValueBytes int, headers []Header) int {
	n := recordOverhead + keyValueBytes
	for _, h := range headers {
		n += headerOverhead + len(h.Key) + len(h.Value)
	}
	return n
}

// DeadLetterHeaders returns the headers of a dead-letter record: the
// original's, less any left by an earlier trip to a dead-letter topic,
// then the origin and the reason, as far as they fit in limit bytes (the
// dead-letter topic's max.message.bytes; 0: Kafka's default) with the
// record's key and value (keyValueBytes). The original fit its topic,
// which Check keeps no larger than the dead-letter topic: the origin comes
// next, and the reason is cut to the room left (its whole text is in the
// log and the store).
func DeadLetterHeaders(orig []Header, keyValueBytes int, reason, topic string, partition int32, offset int64, limit int) []Header {
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	out := make([]Header, 0, len(orig)+4)
	for _, h := range orig {
		switch h.Key {
		case ReasonHeader, OriginalTopicHeader, OriginalPartitionHeader, OriginalOffsetHeader:
			continue // a record dead-lettered before: these name this trip
		}
		out = append(out, h)
	}
	room := limit - RecordSize(keyValueBytes, out)
	for _, h := range []Header{
		{Key: OriginalTopicHeader, Value: []byte(topic)},
		{Key: OriginalPartitionHeader, Value: []byte(strconv.Itoa(int(partition)))},
		{Key: OriginalOffsetHeader, Value: []byte(strconv.FormatInt(offset, 10))},
	} {
		if n := headerOverhead + len(h.Key) + len(h.Value); n <= room {
			out, room = append(out, h), room-n
		}
	}
	if room -= headerOverhead + len(ReasonHeader); room > 0 {
		out = append(out, Header{Key: ReasonHeader, Value: []byte(cut(reason, min(room, MaxReasonBytes)))})
	}
	return out
}

// cut shortens s to at most n bytes at a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// MaxMessageBytesConfig is the topic config that bounds a record batch.
const MaxMessageBytesConfig = "max.message.bytes"

// CheckDeadLetterRoom reports a dead-letter topic that takes smaller
// records than a topic it serves (limits: max.message.bytes by topic): a
// record the topic accepts could then not be dead-lettered.
func CheckDeadLetterRoom(limits map[string]int, topics []string, dlq string) error {
	for _, t := range topics {
		if limits[t] > limits[dlq] {
			return fmt.Errorf("dead-letter topic %q takes records up to %d bytes (%s), less than topic %q's %d: a record it accepts could not be dead-lettered",
				dlq, limits[dlq], MaxMessageBytesConfig, t, limits[t])
		}
	}
	return nil
}
