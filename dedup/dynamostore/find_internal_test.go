package dynamostore

import (
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup"
)

// Every key layout.key can store maps back, through storedKey, to a key
// whose hash is the logged one, unless part of it was hashed to fit; and
// those are told apart as unmatchable, never matched wrongly.
func TestStoredKeyInvertsKey(t *testing.T) {
	long := strings.Repeat("x", 3000)
	cases := []struct {
		key         string
		unmatchable map[bool]bool // by tenant layout
	}{
		{"orders#order-42", nil},
		{"tenant-7#msg-1", nil},
		{"ns#a#b", nil}, // a '#' inside the fingerprint
		{"ns#" + strings.Repeat("y", 1500), map[bool]bool{true: true}}, // too long for sk only
		{"ns#" + long, map[bool]bool{false: true, true: true}},
		{"ns#\xff\xfe", map[bool]bool{false: true, true: true}}, // not UTF-8
		{"ns#sha256:posing", map[bool]bool{false: true, true: true}},
		{"sha256:posing#x", map[bool]bool{true: true}},
		{"nohash", nil},        // default layout only: no '#'
		{"nohash" + long, nil}, // default layout: the whole key hashed
	}
	for _, tenant := range []bool{false, true} {
		l := layout{tenant: tenant}
		for _, c := range cases {
			item, err := l.key(c.key)
			if err != nil {
				var bad *BadKeyError
				if tenant && errors.As(err, &bad) {
					continue // the tenant layout refuses keys without '#'
				}
				t.Fatalf("tenant %v: key(%.40q): %v", tenant, c.key, err)
			}
			key, hashed, ok := l.storedKey(item)
			if !ok {
				t.Fatalf("tenant %v, %.40q: item not recognised", tenant, c.key)
			}
			h := dedup.KeyHash(c.key)
			switch {
			case c.unmatchable[tenant]:
				if key != "" || hashed {
					t.Errorf("tenant %v, %.40q: got key %.40q hashed %v, want unmatchable", tenant, c.key, key, hashed)
				}
			case hashed:
				if !strings.HasPrefix(key, hashedPrefix+h) {
					t.Errorf("tenant %v, %.40q: hashed form %q does not start with key hash %s", tenant, c.key, key, h)
				}
			default:
				if key != c.key {
					t.Errorf("tenant %v: stored key %.40q, want %.40q", tenant, key, c.key)
				}
			}
		}
	}
}

func TestIsKeyHash(t *testing.T) {
	for h, want := range map[string]bool{
		dedup.KeyHash("orders#1"): true,
		"0123456789ab":            true,
		"0123456789AB":            false, // dedup.KeyHash is lowercase
		"0123456789a":             false,
		"0123456789abc":           false,
		"0123456789ag":            false,
		"":                        false,
	} {
		if got := isKeyHash(h); got != want {
			t.Errorf("isKeyHash(%q) = %v, want %v", h, got, want)
		}
	}
}
