package httpidem

import (
	"errors"
	"net/http"
	"testing"
)

// A stored response reads back as it was written: its status, the
// allowlisted fields only (every value of each), and its body; a record
// this package did not write is refused.
func TestRecordRoundTrip(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}, "Location": {"/a", "/b"}, "Set-Cookie": {"s=1"}}
	b := encode(http.StatusCreated, h, []string{"Content-Type", "Location"}, []byte(`{"id":1}`))
	got := http.Header{}
	status, body, err := decode(b, got)
	if err != nil || status != http.StatusCreated || string(body) != `{"id":1}` {
		t.Fatalf("decode: %d %q %v", status, body, err)
	}
	if len(got) != 2 || got.Get("Content-Type") != "application/json" || len(got["Location"]) != 2 || got.Get("Set-Cookie") != "" {
		t.Errorf("fields %v, want the allowlisted ones", got)
	}
	for _, bad := range [][]byte{nil, {2, 0, 200, 0}, b[:5]} {
		if _, _, err := decode(bad, http.Header{}); !errors.Is(err, errBadRecord) {
			t.Errorf("decode(%v): %v, want errBadRecord", bad, err)
		}
	}
}

func TestNewRefusesNoRunner(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Error("New(nil) was accepted")
	}
}
