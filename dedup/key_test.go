package dedup_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup"
)

func TestKey(t *testing.T) {
	k, err := dedup.Key("orders", "o-1")
	if err != nil || k != "orders#o-1" {
		t.Fatalf("Key = %q, %v", k, err)
	}
	if _, err := dedup.Key("orders", ""); !errors.Is(err, dedup.ErrEmptyKey) {
		t.Fatalf("empty key: %v", err)
	}
	// Keys are kept as given: mapping them onto a medium's limits is the
	// Store's business.
	for _, raw := range []string{strings.Repeat("x", 10*1024), "a\xff\xfe"} {
		if k, err := dedup.Key("orders", raw); err != nil || k != "orders#"+raw {
			t.Fatalf("Key of %d bytes changed to %.40q, %v", len(raw), k, err)
		}
	}
	if _, err := dedup.Key(strings.Repeat("n", 300), "k"); err == nil {
		t.Fatal("an oversized namespace was accepted")
	}
}

func TestBodyKey(t *testing.T) {
	body := []byte("order 42")
	key, hash, err := dedup.BodyKey("orders", body)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := dedup.DerivedKey("orders", dedup.PayloadHash(body))
	if key != want || hash != dedup.PayloadHash(body) {
		t.Fatalf("BodyKey = %q, %q; want %q, %q", key, hash, want, dedup.PayloadHash(body))
	}
	if _, _, err := dedup.BodyKey(strings.Repeat("n", 300), body); err == nil {
		t.Fatal("an oversized namespace was accepted")
	}
}

func TestAppendBodyKeyIsBodyKey(t *testing.T) {
	for _, body := range [][]byte{nil, []byte("x"), make([]byte, 1000)} {
		key, hash, err := dedup.BodyKey("ns", body)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(dedup.AppendBodyKey([]byte("pre"), "ns", body)); got != "pre"+key {
			t.Fatalf("AppendBodyKey %q, want %q", got, "pre"+key)
		}
		if got := string(dedup.AppendPayloadHash(nil, body)); got != hash || got != dedup.PayloadHash(body) {
			t.Fatalf("AppendPayloadHash %q, want %q", got, hash)
		}
	}
	buf := make([]byte, 0, 128)
	body := []byte("body")
	if n := testing.AllocsPerRun(100, func() { dedup.AppendBodyKey(buf[:0], "ns", body) }); n != 0 {
		t.Fatalf("AppendBodyKey into room allocates %v times", n)
	}
}
