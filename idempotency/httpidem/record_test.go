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

// The key is a structured-field string or a bare token; none, two, or an
// empty one is no key.
func TestParseKey(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
		ok   bool
	}{
		{[]string{`"8e03978e-40d5"`}, "8e03978e-40d5", true},
		{[]string{`8e03978e`}, "8e03978e", true},
		{[]string{` "a\"b" `}, `a"b`, true},
		{nil, "", false},
		{[]string{`""`}, "", false},
		{[]string{""}, "", false},
		{[]string{"a", "b"}, "", false},
		{[]string{`"unterminated\"`}, "", false},
	} {
		got, ok := parseKey(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("parseKey(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestNewRefusesNoRunner(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Error("New(nil) was accepted")
	}
}
