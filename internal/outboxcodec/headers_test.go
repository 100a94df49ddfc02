package outboxcodec_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/onceq/onceq/internal/outboxcodec"
)

func TestRoundTrip(t *testing.T) {
	for _, h := range []map[string]string{nil, {"": ""}, {"a\x00": "\xff", "b": "v", "long": string(make([]byte, 300))}} {
		got, err := outboxcodec.Decode(outboxcodec.Encode(h))
		if err != nil || len(got) != len(h) || !maps.Equal(got, h) {
			t.Fatalf("round trip of %q: %q, %v", h, got, err)
		}
	}
	b := outboxcodec.Encode(map[string]string{"name": "value"})
	if _, err := outboxcodec.Decode(b[:len(b)-1]); !errors.Is(err, outboxcodec.ErrCorrupt) {
		t.Fatalf("Decode of cut headers: %v, want ErrCorrupt", err)
	}
}
