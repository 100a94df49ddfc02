package payload_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/payload"
)

// benchBody is an order of about size bytes: a few fields and as many
// lines as fit.
func benchBody(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"order_id":"A-12345","customer":{"id":"c-9","tier":"gold"},"sent_at":"2026-12-03T10:00:00Z","lines":[`)
	for i := 0; b.Len() < size-40; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"sku-%d","qty":%d,"price":%d.50}`, i, i%5+1, i%90+10)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func BenchmarkPayloadHash(b *testing.B) {
	modes := []struct {
		name string
		f    consumer.PayloadHashFunc
	}{
		{"whole_body", consumer.WholeBody},
		{"canonical_json", payload.CanonicalJSON},
		{"json_fields", payload.JSONFields("order_id", "lines")},
	}
	for _, size := range []int{256, 4096} {
		body := benchBody(size)
		for _, m := range modes {
			b.Run(fmt.Sprintf("%s/%dB", m.name, size), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if _, err := m.f(body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkJSONKey(b *testing.B) {
	m := &broker.Message{Body: benchBody(4096)}
	f := payload.JSONKey("order_id")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f(m); err != nil {
			b.Fatal(err)
		}
	}
}
