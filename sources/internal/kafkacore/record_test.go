package kafkacore

import (
	"strings"
	"testing"

	"github.com/onceq/onceq/broker"
)

func TestRecordID(t *testing.T) {
	long := strings.Repeat("t", 200)
	for _, c := range []struct {
		topic     string
		partition int32
		offset    int64
		want      string
	}{{"orders", 3, 42, "orders/3/42"}, {long, 0, 1 << 40, long + "/0/1099511627776"}} {
		if got := RecordID(c.topic, c.partition, c.offset); got != c.want {
			t.Errorf("RecordID = %q, want %q", got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { RecordID("orders", 3, 123456789) }); n != 1 {
		t.Errorf("RecordID allocates %v times, want 1", n)
	}
}

// TestIDAndKey: the ID and the key come out whole, whatever their sizes,
// from one allocation.
func TestIDAndKey(t *testing.T) {
	long := strings.Repeat("k", 300)
	for _, key := range []string{"", "customer-42", long} {
		id, k := IDAndKey("orders", 3, 42, []byte(key))
		if id != "orders/3/42" || k != key {
			t.Errorf("IDAndKey(%d-byte key) = %q, %d-byte key %q", len(key), id, len(k), k)
		}
	}
	key := []byte("customer-42")
	if n := testing.AllocsPerRun(100, func() { IDAndKey("orders", 3, 123456789, key) }); n != 1 {
		t.Errorf("IDAndKey allocates %v times, want 1", n)
	}
}

// TestFingerprintAllocates: the default key costs one allocation (the key
// itself) for a usual topic and record key, whatever the value's size.
func TestFingerprintAllocates(t *testing.T) {
	m := &broker.Message{OrderingKey: "customer-42", Body: make([]byte, 1024), Origin: broker.Origin{Destination: "orders"}}
	if n := testing.AllocsPerRun(100, func() { _, _ = Fingerprint(m) }); n != 1 {
		t.Errorf("Fingerprint allocates %v times, want 1", n)
	}
}

func BenchmarkFingerprint(b *testing.B) {
	m := &broker.Message{OrderingKey: "customer-42", Body: make([]byte, 1024), Origin: broker.Origin{Destination: "orders"}}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Fingerprint(m)
	}
}
