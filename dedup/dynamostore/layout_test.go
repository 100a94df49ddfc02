package dynamostore

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
)

// keyAttrs is the item key of k as strings: pk, and sk ("" in the default
// layout).
func keyAttrs(t *testing.T, l layout, k string) (pk, sk string, err error) {
	t.Helper()
	m, err := l.key(k)
	if err != nil {
		return "", "", err
	}
	pk = m[attrPK].(*types.AttributeValueMemberS).Value
	if v, ok := m[attrSK]; ok {
		sk = v.(*types.AttributeValueMemberS).Value
	}
	return pk, sk, nil
}

func TestLayoutKey(t *testing.T) {
	if _, err := (layout{}).key(""); !errors.Is(err, dedup.ErrEmptyKey) {
		t.Fatal(err)
	}
	tenant := layout{tenant: true}
	if pk, sk, err := keyAttrs(t, tenant, "t#a#b"); err != nil || pk != "t" || sk != "a#b" {
		t.Fatalf("%q %q %v", pk, sk, err)
	}
	long := strings.Repeat("k", 1500)
	if pk, sk, err := keyAttrs(t, tenant, "t#"+long); err != nil || pk != "t" || sk != hashKey(long) {
		t.Fatalf("a 1.5 KB fingerprint in the tenant layout: %q %.20q %v, want it hashed", pk, sk, err)
	}
	if pk, _, err := keyAttrs(t, layout{}, "ns#"+long); err != nil || pk != "ns#"+long {
		t.Fatalf("a 1.5 KB key in the default layout: %.20q %v, want it kept", pk, err)
	}
	// The mapping dedup.Key made before it moved here, so records stored
	// then are found.
	huge := strings.Repeat("x", 3000)
	if pk, _, _ := keyAttrs(t, layout{}, "ns#"+huge); pk != "ns#"+hashKey(huge) {
		t.Fatalf("a 3 KB key stored as %.30q", pk)
	}
	_, _, err := keyAttrs(t, tenant, strings.Repeat("t", maxPartitionKey+1)+"#fp")
	var tl *dedup.KeyTooLongError
	if !errors.As(err, &tl) || !errors.Is(err, dedup.ErrKeyTooLong) || tl.Part != "tenant" {
		t.Fatalf("a tenant over the partition key limit: %v, want a *dedup.KeyTooLongError", err)
	}
	for _, bad := range []string{"no-tenant", "#fp", "tenant#"} {
		if _, err := tenant.key(bad); !errors.Is(err, ErrBadKey) {
			t.Fatalf("%q: %v, want ErrBadKey", bad, err)
		}
	}
}

// Every key maps to one storable item key, always the same one, and two
// distinct keys never to the same one.
func FuzzLayoutKey(f *testing.F) {
	for _, s := range []string{"ns#o-1", "ns#" + strings.Repeat("x", 3000), "ns#\xff\xfe", "a#b#c", "sha256:00", "ns#sha256:ab", "t#" + strings.Repeat("y", 1100)} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, l := range []layout{{}, {tenant: true}} {
			pa, sa, errA := keyAttrs(t, l, a)
			pb, sb, errB := keyAttrs(t, l, b)
			if errA != nil || errB != nil {
				continue
			}
			for _, v := range []struct {
				s   string
				max int
			}{{pa, maxPartitionKey}, {sa, maxSortKey}} {
				if len(v.s) > v.max || !utf8.ValidString(v.s) {
					t.Fatalf("layout %+v maps %.40q to %.40q: not storable", l, a, v.s)
				}
			}
			if again, sAgain, _ := keyAttrs(t, l, a); again != pa || sAgain != sa {
				t.Fatalf("layout %+v maps %.40q two ways", l, a)
			}
			if a != b && pa == pb && sa == sb {
				t.Fatalf("layout %+v maps %.40q and %.40q to one item", l, a, b)
			}
		}
	})
}

// The stored key of a (tenant, namespace, key) tuple, with or without a
// tenant, the key a producer's or a derived one, through dedup's encoding
// and every layout: distinct tuples never share an item.
func FuzzStoredKey(f *testing.F) {
	hx := strings.Repeat("ab", 32)
	long := strings.Repeat("k", 3000)
	f.Add(false, "", "ns", long, false, false, "", "ns", hashKey("ns#" + long)[len(hashedPrefix):], false)
	f.Add(false, "", "ns", long, false, false, "", "ns", "sha256:"+hashKey(long)[len(hashedPrefix):], false)
	f.Add(false, "", "shop", "eu#o-1", false, false, "", "shop#eu", "o-1", false)
	f.Add(false, "", "ns", hx, false, false, "", "ns", hx, true)
	f.Add(true, "billing", "invoice", "123", false, false, "", "billing", "invoice#123", false)
	f.Add(true, "t", "ns", long, false, false, "", "t", "!#ns#"+long, false)
	f.Add(true, "t", "ns", hx, true, true, "t#", "ns", hx, true)
	f.Fuzz(func(t *testing.T, tA bool, tenantA, nsA, kA string, dA bool, tB bool, tenantB, nsB, kB string, dB bool) {
		enc := func(hasTenant bool, tenant, ns, k string, derived bool) (string, error) {
			key, err := dedup.Key(ns, k)
			if derived {
				key, err = dedup.DerivedKey(ns, k)
			}
			if err != nil || !hasTenant {
				return key, err
			}
			return dedup.TenantKey(tenant, key)
		}
		a, errA := enc(tA, tenantA, nsA, kA, dA)
		b, errB := enc(tB, tenantB, nsB, kB, dB)
		if errA != nil || errB != nil || a == b {
			return // a == b is the encoding's own (dedup's FuzzKey)
		}
		for _, l := range []layout{{}, {tenant: true}, {tenant: true, shards: 4}} {
			pa, sa, errA := keyAttrs(t, l, a)
			pb, sb, errB := keyAttrs(t, l, b)
			if errA == nil && errB == nil && pa == pb && sa == sb {
				t.Fatalf("layout %+v stores %.40q and %.40q as one item", l, a, b)
			}
		}
	})
}
