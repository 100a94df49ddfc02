package dedup_test

import (
	"errors"
	"net/url"
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

// tuple is what a stored key encodes: a tenant (when hasTenant), the
// namespace, and a key, a producer's or one onceq derived.
type tuple struct {
	hasTenant       bool
	tenant, ns, key string
	derived         bool
}

// encode is the stored key of x, as the consumer builds it.
func (x tuple) encode() (string, error) {
	k, err := pairKey(x.ns, x.key, x.derived)
	if err != nil || !x.hasTenant {
		return k, err
	}
	return dedup.TenantKey(x.tenant, k)
}

// norm is x as its stored key can tell it: a "derived" key that is not 64
// lowercase hex digits is a producer key (DerivedKey takes it as one).
func (x tuple) norm() tuple {
	x.derived = x.derived && len(x.key) == 64 && strings.Trim(x.key, "0123456789abcdef") == ""
	if !x.hasTenant {
		x.tenant = ""
	}
	return x
}

// decode reads a stored key back by the documented encoding alone:
// "[<escaped tenant>#!#]<namespace>#<key part>", the key part 64 hex
// digits (derived), or Escape and a producer key, or a producer key.
func decode(s string) (tuple, bool) {
	var x tuple
	first, rest, ok := strings.Cut(s, "#")
	if !ok {
		return x, false
	}
	if after, tenanted := strings.CutPrefix(rest, "!#"); tenanted {
		t, err := url.PathUnescape(first)
		if err != nil {
			return x, false
		}
		x.hasTenant, x.tenant = true, t
		if first, rest, ok = strings.Cut(after, "#"); !ok {
			return x, false
		}
	}
	x.ns = first
	switch {
	case len(rest) == 64 && strings.Trim(rest, "0123456789abcdef") == "":
		x.key, x.derived = rest, true
	case strings.HasPrefix(rest, "!"):
		x.key = rest[1:]
	default:
		x.key = rest
	}
	return x, x.key != ""
}

// The example of a tenant's key that was another namespace's: tenant
// "billing" with namespace "invoice" and key "123", and namespace
// "billing" with key "invoice#123", both stored "billing#invoice#123".
func TestTenantKeyIsNotAnotherNamespacesKey(t *testing.T) {
	tenanted := tuple{hasTenant: true, tenant: "billing", ns: "invoice", key: "123"}
	plain := tuple{ns: "billing", key: "invoice#123"}
	a, errA := tenanted.encode()
	b, errB := plain.encode()
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if a == b {
		t.Fatalf("%+v and %+v are one stored key %q", tenanted, plain, a)
	}
	// A key without a tenant keeps the form it always had; a tenant's is
	// marked so no namespace's key can spell it.
	if b != "billing#invoice#123" || a != "billing#!#invoice#123" {
		t.Fatalf("stored keys %q and %q, want billing#!#invoice#123 and billing#invoice#123", a, b)
	}
}

// No two distinct (tenant, namespace, key, source) tuples share a stored
// key: each stored key decodes back to the one tuple it was built from,
// and starts with its tenant (escaped) or, without one, its namespace.
func FuzzKey(f *testing.F) {
	f.Add(true, "billing", "invoice", "123", false, false, "", "billing", "invoice#123", false)
	f.Add(false, "", "shop", "eu#o-1", false, false, "", "shop#eu", "o-1", false)
	f.Add(false, "", "ns", hex64, false, false, "", "ns", hex64, true)
	f.Add(false, "", "ns", "sha256:"+hex64, false, false, "", "ns", strings.Repeat("k", 3000), false)
	f.Add(false, "", "ns", "!"+hex64, false, false, "", "ns", hex64, false)
	f.Add(false, "", "ns", "!!x", false, false, "", "ns", "!x", false)
	f.Add(true, "t", "ns", hex64, true, false, "", "t", "!#ns#"+hex64, false)
	f.Add(true, "t", "!a", "p", false, false, "", "t", "!a#p", false)
	f.Add(true, "a#b", "c", "d", false, true, "a", "b#c", "d", false)
	f.Add(true, "a%23b", "c", "d", false, true, "a#b", "c", "d", false)
	f.Add(true, "t", "", "#k", false, true, "t", "#k", "x", false)
	f.Fuzz(func(t *testing.T, tA bool, tenantA, nsA, kA string, dA bool, tB bool, tenantB, nsB, kB string, dB bool) {
		x, y := tuple{tA, tenantA, nsA, kA, dA}, tuple{tB, tenantB, nsB, kB, dB}
		a, errA := x.encode()
		b, errB := y.encode()
		if errA != nil || errB != nil {
			return
		}
		if got, ok := decode(a); !ok || got != x.norm() {
			t.Fatalf("%+v stored as %q, which decodes to %+v", x.norm(), a, got)
		}
		if a == b && x.norm() != y.norm() {
			t.Fatalf("%+v and %+v share the stored key %q", x.norm(), y.norm(), a)
		}
		first, _, _ := strings.Cut(a, "#")
		if want, _ := dedup.EscapeTenant(tenantA); tA && first != want || !tA && first != nsA {
			t.Fatalf("stored key %q does not start with its tenant or namespace", a)
		}
		if got := string(dedup.AppendKey(nil, nsA, kA)); !dA && !tA && got != a {
			t.Fatalf("AppendKey %q, Key %q", got, a)
		}
	})
}
