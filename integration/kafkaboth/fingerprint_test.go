package kafkaboth_test

import (
	"testing"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkasource"
)

// A record keys, and is identified, by franz-go exactly as by kafka-go, so a
// deployment can switch clients and keep its dedup records.
func TestFingerprintMatchesKafkaSource(t *testing.T) {
	t.Parallel()
	cases := []struct {
		key, value string
		headers    map[string]string
	}{
		{"cust-1", `{"order":1}`, nil},
		{"", "", nil},
		{"k", "v", map[string]string{consumer.IdempotencyKeyAttribute: "id-9", "other": "x"}},
	}
	for _, c := range cases {
		rec := &kgo.Record{Topic: "orders", Partition: 4, Offset: 77, Key: []byte(c.key), Value: []byte(c.value)}
		msg := kafkago.Message{Topic: "orders", Partition: 4, Offset: 77, Key: []byte(c.key), Value: []byte(c.value)}
		for k, v := range c.headers {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
			msg.Headers = append(msg.Headers, kafkago.Header{Key: k, Value: []byte(v)})
		}
		fm, km := franzsource.ToMessage(rec, 1), kafkasource.ToMessage(msg, 1)
		fk, _ := franzsource.Fingerprint(fm)
		kk, _ := kafkasource.Fingerprint(km)
		if fk != kk || fm.ID != km.ID || fm.Origin != km.Origin || fm.OrderingKey != km.OrderingKey {
			t.Fatalf("record %+v: franz key %q ID %q origin %+v; kafka key %q ID %q origin %+v",
				c, fk, fm.ID, fm.Origin, kk, km.ID, km.Origin)
		}
	}
}

// franzsource's documented example record, as kafka-go reads it, gets the
// key franz-go's reading gets.
func TestFingerprintExampleRecordMatchesKafkaGo(t *testing.T) {
	t.Parallel()
	rec := &kgo.Record{Topic: "payments", Partition: 2, Offset: 41, Key: []byte("account-1"), Value: []byte(`{"amount":10}`)}
	a, _ := franzsource.Fingerprint(franzsource.ToMessage(rec, 1))
	same := kafkago.Message{Topic: "payments", Partition: 2, Offset: 41, Key: []byte("account-1"), Value: []byte(`{"amount":10}`)}
	k, _ := kafkasource.Fingerprint(kafkasource.ToMessage(same, 1))
	if a != k {
		t.Fatalf("kafka-go, same key: false (franz %q, kafka-go %q)", a, k)
	}
}
