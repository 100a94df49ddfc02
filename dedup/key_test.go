package dedup_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

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
	long := strings.Repeat("x", 10*1024)
	k1, err := dedup.Key("orders", long)
	if err != nil || len(k1) > dedup.MaxKeyLen || !strings.HasPrefix(k1, "orders#sha256:") {
		t.Fatalf("long key stored as %q (%d bytes), %v", k1[:min(40, len(k1))], len(k1), err)
	}
	k2, _ := dedup.Key("orders", long+"y")
	if k1 == k2 {
		t.Fatal("two long keys collide")
	}
	bad := string([]byte{'a', 0xff, 0xfe})
	k3, err := dedup.Key("orders", bad)
	if err != nil || !utf8.ValidString(k3) {
		t.Fatalf("non-UTF-8 key stored as %q, %v", k3, err)
	}
	edge := strings.Repeat("e", dedup.MaxKeyLen-len("orders#"))
	if k, _ := dedup.Key("orders", edge); k != "orders#"+edge {
		t.Fatal("a key of exactly the limit was hashed")
	}
	if k, _ := dedup.Key("orders", edge+"e"); len(k) > dedup.MaxKeyLen {
		t.Fatal("a key one byte over the limit was kept")
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
	want, _ := dedup.Key("orders", dedup.BodyFingerprint(body))
	if key != want || hash != dedup.PayloadHash(body) {
		t.Fatalf("BodyKey = %q, %q; want %q, %q", key, hash, want, dedup.PayloadHash(body))
	}
	if _, _, err := dedup.BodyKey(strings.Repeat("n", 300), body); err == nil {
		t.Fatal("an oversized namespace was accepted")
	}
}

func FuzzKey(f *testing.F) {
	for _, s := range []string{"o-1", "", strings.Repeat("x", 3000), "\xff\xfe", "a#b"} {
		f.Add("onceq", s)
	}
	f.Fuzz(func(t *testing.T, ns, raw string) {
		k, err := dedup.Key(ns, raw)
		if err != nil {
			return
		}
		if len(k) > dedup.MaxKeyLen || !utf8.ValidString(k) || !strings.HasPrefix(k, ns+"#") {
			t.Fatalf("Key(%q, %q) = %q: not storable", ns, raw, k)
		}
	})
}
