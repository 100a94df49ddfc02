package kafkacore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/sources/internal/waitlog"
	"github.com/onceq/onceq/sources/kafkagroup"
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

// RecordSize is the most a batch of one record of these sizes takes.
func RecordSize(keyValueBytes int, headers []Header) int {
	n := recordOverhead + keyValueBytes
	for _, h := range headers {
		n += headerOverhead + len(h.Key) + len(h.Value)
	}
	return n
}

// ClientHeader is a Kafka client's record header: kafka-go's Header and
// franz-go's RecordHeader are both this struct.
type ClientHeader interface {
	~struct {
		Key   string
		Value []byte
	}
}

// DeadLetterHeaders returns the headers of a dead-letter record, in the
// client's own header type: see deadLetterHeaders.
func DeadLetterHeaders[H ClientHeader](orig []H, keyValueBytes int, reason, topic string, partition int32, offset int64, limit int) []H {
	in := make([]Header, len(orig))
	for i, h := range orig {
		in[i] = Header(h)
	}
	hs := deadLetterHeaders(in, keyValueBytes, reason, topic, partition, offset, limit)
	out := make([]H, len(hs))
	for i, h := range hs {
		out[i] = H(h)
	}
	return out
}

// deadLetterHeaders returns the headers of a dead-letter record: the
// original's, less any left by an earlier trip to a dead-letter topic,
// then the origin and the reason, as far as they fit in limit bytes (the
// dead-letter topic's max.message.bytes; 0: Kafka's default) with the
// record's key and value (keyValueBytes). The original fit its topic,
// which Check keeps no larger than the dead-letter topic: the origin comes
// next, and the reason is cut to the room left (its whole text is in the
// log and the store).
func deadLetterHeaders(orig []Header, keyValueBytes int, reason, topic string, partition int32, offset int64, limit int) []Header {
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	out := make([]Header, 0, len(orig)+4)
	for _, h := range orig {
		switch h.Key {
		case kafkagroup.ReasonHeader, kafkagroup.OriginalTopicHeader, kafkagroup.OriginalPartitionHeader, kafkagroup.OriginalOffsetHeader:
			continue // a record dead-lettered before: these name this trip
		}
		out = append(out, h)
	}
	room := limit - RecordSize(keyValueBytes, out)
	for _, h := range []Header{
		{Key: kafkagroup.OriginalTopicHeader, Value: []byte(topic)},
		{Key: kafkagroup.OriginalPartitionHeader, Value: []byte(strconv.Itoa(int(partition)))},
		{Key: kafkagroup.OriginalOffsetHeader, Value: []byte(strconv.FormatInt(offset, 10))},
	} {
		if n := headerOverhead + len(h.Key) + len(h.Value); n <= room {
			out, room = append(out, h), room-n
		}
	}
	if room -= headerOverhead + len(kafkagroup.ReasonHeader); room > 0 {
		out = append(out, Header{Key: kafkagroup.ReasonHeader, Value: []byte(cut(reason, min(room, MaxReasonBytes)))})
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

// MessageLimits are topics' max.message.bytes, as the brokers' answer to
// DescribeConfigs gives them.
type MessageLimits map[string]int

// Add takes one config entry of topic's answer: the limit, when the entry
// is max.message.bytes and a positive number.
func (l MessageLimits) Add(topic, name, value string) {
	if n, err := strconv.Atoi(value); name == MaxMessageBytesConfig && err == nil && n > 0 {
		l[topic] = n
	}
}

// Fill gives each of topics that the answer did not tell the broker's
// default, and returns l.
func (l MessageLimits) Fill(topics []string) MessageLimits {
	for _, t := range topics {
		if l[t] == 0 {
			l[t] = DefaultMaxMessageBytes
		}
	}
	return l
}

// Check is both sources' Check: within ctx (bounded by CheckTimeout when
// it has no deadline) it proves, through exist, that topics and the
// dead-letter topic dlq, if one is set, exist, and, through limits, that
// dlq takes every record the topics do (max.message.bytes). It keeps
// dlq's max.message.bytes in *dlqMax, unless it holds one (learned once,
// by New, before the client that writes dead letters exists); pkg names
// the source in its errors. While brokers keep it waiting it says so on
// log (every waitlog.Every), and an error that does not name them is given
// their addresses.
func Check(ctx context.Context, pkg string, brokers []string, log *slog.Logger, topics []string, dlq string, dlqMax *int,
	exist func(context.Context, []string) error, limits func(context.Context, []string) (MessageLimits, error)) (err error) {
	ctx, cancel := BoundCheck(ctx)
	defer cancel()
	defer waitlog.Say(ctx, log, pkg+": waiting for the brokers to answer the check of the topics",
		slog.String("brokers", strings.Join(brokers, ",")))()
	defer func() {
		if err != nil && !namesAny(err, brokers) {
			err = fmt.Errorf("%w (brokers %s)", err, strings.Join(brokers, ","))
		}
	}()
	all := slices.Clone(topics)
	if dlq != "" {
		all = append(all, dlq)
	}
	if err := exist(ctx, all); err != nil || dlq == "" {
		return err
	}
	l, err := limits(ctx, all)
	if err != nil {
		return err
	}
	if *dlqMax == 0 {
		*dlqMax = l[dlq]
	}
	if err := CheckDeadLetterRoom(l, topics, dlq); err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	return nil
}

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

func namesAny(err error, brokers []string) bool {
	s := err.Error()
	for _, b := range brokers {
		if strings.Contains(s, b) {
			return true
		}
	}
	return false
}
