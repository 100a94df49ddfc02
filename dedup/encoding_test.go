package dedup_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup"
)

const hex64 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// pairKey is the stored key of (namespace, key) taken as a producer key
// (derived false) or as a derived one.
func pairKey(ns, k string, derived bool) (string, error) {
	if derived {
		return dedup.DerivedKey(ns, k)
	}
	return dedup.Key(ns, k)
}

// A producer key can pose neither as a derived key nor as a hashed one
// (issues 26.4, 27.3): the long key's hashed form, a body's hash and
// another tenant's key each keep their own record.
func TestProducerKeysCannotNameOthers(t *testing.T) {
	long := strings.Repeat("x", 3000)
	derived, _ := dedup.DerivedKey("ns", hex64)
	for _, posing := range []string{hex64, dedup.HashPart(long), "!" + hex64, "!"} {
		k, err := dedup.Key("ns", posing)
		if err != nil {
			t.Fatal(err)
		}
		if k == derived || k == "ns#"+dedup.HashPart(long) || k == "ns#"+posing {
			t.Fatalf("producer key %.30q stored as %.40q: poses as a derived or hashed key", posing, k)
		}
	}
	if k, _ := dedup.Key("ns", "o-1"); k != "ns#o-1" {
		t.Fatalf("an ordinary producer key stored as %q, want its old form", k)
	}
	if _, err := dedup.Key("shop#eu", "o-1"); !errors.Is(err, dedup.ErrBadNamespace) {
		t.Fatalf("namespace with '#': %v, want ErrBadNamespace", err)
	}
	var ne *dedup.NamespaceError
	if err := dedup.CheckNamespace("a#b"); !errors.As(err, &ne) {
		t.Fatalf("CheckNamespace: %v, want a *NamespaceError", err)
	}
}

// No two distinct (namespace, key, source) triples share a stored key, and
// the namespace is what precedes the first '#'.
func FuzzKey(f *testing.F) {
	f.Add("shop", "eu#o-1", false, "shop#eu", "o-1", false)
	f.Add("ns", hex64, false, "ns", hex64, true)
	f.Add("ns", "sha256:"+hex64, false, "ns", strings.Repeat("k", 3000), false)
	f.Add("ns", "!"+hex64, false, "ns", hex64, false)
	f.Add("ns", "!!x", false, "ns", "!x", false)
	f.Fuzz(func(t *testing.T, nsA, kA string, dA bool, nsB, kB string, dB bool) {
		a, errA := pairKey(nsA, kA, dA)
		b, errB := pairKey(nsB, kB, dB)
		if errA != nil || errB != nil {
			return
		}
		if ns, _, _ := strings.Cut(a, "#"); ns != nsA {
			t.Fatalf("stored key %q does not start with its namespace %q", a, nsA)
		}
		// A "derived" key that is not one is a producer key.
		srcA, srcB := dA && len(kA) == 64 && strings.Trim(kA, "0123456789abcdef") == "", dB && len(kB) == 64 && strings.Trim(kB, "0123456789abcdef") == ""
		if a == b && (nsA != nsB || kA != kB || srcA != srcB) {
			t.Fatalf("(%q, %q, derived %v) and (%q, %q, derived %v) share the stored key %q", nsA, kA, srcA, nsB, kB, srcB, a)
		}
		if got := string(dedup.AppendKey(nil, nsA, kA)); !dA && got != a {
			t.Fatalf("AppendKey %q, Key %q", got, a)
		}
	})
}
