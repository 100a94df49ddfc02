package kafkalambda

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/sources/kafkasource"
)

// A Kafka record maps as package kafkasource maps a fetched one, so the key is
// the same from either.
func TestKafkaMessageMatchesSource(t *testing.T) {
	km := kafkago.Message{Topic: "orders", Partition: 3, Offset: 42, Key: []byte("k1"), Value: []byte(`{"a":1}`),
		Headers: []kafkago.Header{{Key: "h", Value: []byte("v")}}}
	want := kafkasource.ToMessage(km, 1)
	got, err := kafkaMessage(&events.KafkaRecord{Topic: "orders", Partition: 3, Offset: 42,
		Key: base64.StdEncoding.EncodeToString(km.Key), Value: base64.StdEncoding.EncodeToString(km.Value),
		Headers: []map[string]events.JSONNumberBytes{{"h": []byte("v")}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != want.ID || got.OrderingKey != want.OrderingKey || string(got.Body) != string(want.Body) || got.Origin != want.Origin || got.Attributes["h"] != "v" {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	fw, _ := kafkasource.Fingerprint(want)
	fg, _ := kafkasource.Fingerprint(got)
	if fw != fg {
		t.Fatalf("fingerprints differ: %s vs %s", fg, fw)
	}
}
