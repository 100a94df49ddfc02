package kafkasource_test

import (
	"context"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
)

func meterProvider(t *testing.T) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, reader
}

// metricValue sums the int64 points (counter or gauge) of name whose
// attributes include all of want; found is false when there are none.
func metricValue(t *testing.T, r *sdkmetric.ManualReader, name string, want ...attribute.KeyValue) (n int64, found bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var points []metricdata.DataPoint[int64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				points = append(points, d.DataPoints...)
			case metricdata.Gauge[int64]:
				points = append(points, d.DataPoints...)
			default:
				t.Fatalf("%s is %T", name, m.Data)
			}
		}
	}
points:
	for _, p := range points {
		for _, kv := range want {
			if v, ok := p.Attributes.Value(kv.Key); !ok || v != kv.Value {
				continue points
			}
		}
		n, found = n+p.Value, true
	}
	return n, found
}

// Commit lag follows the partition from fetched to committed; dead-letter
// sends and commits are counted on kfake.
func TestMetrics(t *testing.T) {
	t.Parallel()
	addr, topic, dlq, group := withDeadLetterTopic(t)
	mp, reader := meterProvider(t)
	s := newSource(t, addr, group, []string{topic}, kafkagroup.DeadLetterTopic(dlq), kafkagroup.WithMeterProvider(mp))
	var out []kgo.Message
	for i := range 5 {
		out = append(out, kgo.Message{Value: []byte{byte('a' + i)}})
	}
	produce(t, writer(t, addr, topic), out...)
	msgs := receiveN(t, s, 5)

	part := []attribute.KeyValue{attribute.String("messaging.destination.name", topic), attribute.String("messaging.destination.partition.id", "0")}
	if n, ok := metricValue(t, reader, "onceq.kafka.commit_lag", part...); !ok || n != 5 {
		t.Fatalf("commit lag with 5 fetched, none done: %d (reported %v), want 5", n, ok)
	}
	if err := s.DeadLetter(context.Background(), msgs[0], "poison"); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	for _, m := range msgs[1:] {
		if err := s.Ack(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	waitCommitted(t, addr, group, topic, []int64{5})
	testenv.Eventually(t, 10*time.Second, "commit lag 0 after committing everything", func() bool {
		n, ok := metricValue(t, reader, "onceq.kafka.commit_lag", part...)
		return ok && n == 0
	})
	if n, _ := metricValue(t, reader, "onceq.kafka.dead_letters", attribute.String("messaging.destination.name", dlq), attribute.String("onceq.result", "ok")); n != 1 {
		t.Errorf("dead letters %d, want 1", n)
	}
	if n, _ := metricValue(t, reader, "onceq.kafka.commits", attribute.String("onceq.result", "ok")); n < 1 {
		t.Errorf("commits %d, want at least 1", n)
	}
	if n, _ := metricValue(t, reader, "onceq.kafka.commits", attribute.String("onceq.result", "error")); n != 0 {
		t.Errorf("failed commits %d", n)
	}
	if n, _ := metricValue(t, reader, "onceq.kafka.late_settles"); n != 0 {
		t.Errorf("late settles %d with no rebalance", n)
	}
}
