package dedup_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup"
)

// Two different (tenant, key) pairs never make one key, whatever '#' and
// '%' they hold; the tenant ends at the first '#'.
func TestTenantKeyInjective(t *testing.T) {
	pairs := [][2]string{
		{"a", "b#c"}, {"a#b", "c"}, {"a%23b", "c"}, {"a#b#c", "d"}, {"a", "b#c#d"}, {"%", "x"}, {"%25", "x"}, {"a%", "23b#c"},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		k, err := dedup.TenantKey(p[0], p[1])
		if err != nil {
			t.Fatal(err)
		}
		if q, dup := seen[k]; dup {
			t.Fatalf("%q and %q both make %q", p, q, k)
		}
		seen[k] = p
		tenant, _, _ := strings.Cut(k, "#")
		if want, _ := dedup.EscapeTenant(p[0]); tenant != want {
			t.Errorf("%q: tenant part %q, want %q", p, tenant, want)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 257), "\xff"} {
		if _, err := dedup.TenantKey(bad, "k"); !errors.Is(err, dedup.ErrBadTenant) {
			t.Errorf("tenant %q: %v, want ErrBadTenant", bad, err)
		}
	}
}

func FuzzTenantKey(f *testing.F) {
	f.Add("a#", "b", "a", "#b")
	f.Fuzz(func(t *testing.T, t1, k1, t2, k2 string) {
		a, err1 := dedup.TenantKey(t1, k1)
		b, err2 := dedup.TenantKey(t2, k2)
		if err1 == nil && err2 == nil && a == b && (t1 != t2 || k1 != k2) {
			t.Fatalf("(%q,%q) and (%q,%q) both make %q", t1, k1, t2, k2, a)
		}
	})
}
