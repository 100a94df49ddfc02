package redrive

import (
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
)

// TenantKeys makes the key a consumer with a tenant function stores, from
// each place a tenant is read; a letter whose tenant cannot be read, or
// cannot key a record, is ErrNoTenant, never a key without its tenant.
func TestTenantKeys(t *testing.T) {
	inner, err := dedup.Key("orders", "order-1")
	if err != nil {
		t.Fatal(err)
	}
	acme, err := dedup.TenantKey("ac#me", inner)
	if err != nil {
		t.Fatal(err)
	}
	msg := func(attrs map[string]string, body string) *broker.Message {
		a := map[string]string{broker.IdempotencyKeyAttribute: "order-1"}
		for k, v := range attrs {
			a[k] = v
		}
		return &broker.Message{Body: []byte(body), Attributes: a}
	}
	for _, c := range []struct {
		what   string
		tenant TenantFunc
		m      *broker.Message
		want   string
	}{
		{"static", Tenant("ac#me"), msg(nil, "{}"), acme},
		{"attribute", TenantAttribute("tenant"), msg(map[string]string{"tenant": "ac#me"}, "{}"), acme},
		{"JSON key", TenantJSONKey("tenant"), msg(nil, `{"tenant":"ac#me"}`), acme},
		{"no attribute", TenantAttribute("tenant"), msg(map[string]string{"Tenant": "ac#me"}, "{}"), ""},
		{"empty attribute", TenantAttribute("tenant"), msg(map[string]string{"tenant": ""}, "{}"), ""},
		{"tenant too long", TenantAttribute("tenant"), msg(map[string]string{"tenant": strings.Repeat("t", dedup.MaxTenantLen+1)}, "{}"), ""},
		{"no JSON key", TenantJSONKey("tenant"), msg(nil, `{"id":1}`), ""},
		{"not JSON", TenantJSONKey("tenant"), msg(nil, "tenant=acme"), ""},
	} {
		got, err := TenantKeys(BodyKeys("orders"), c.tenant)(c.m)
		switch {
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("%s: %q, %v; want %q", c.what, got, err, c.want)
		case c.want == "" && (!errors.Is(err, ErrNoTenant) || got != ""):
			t.Errorf("%s: %q, %v; want ErrNoTenant", c.what, got, err)
		}
	}
}

// A letter naming no tenant is left on its Lot (neither moved, settled
// nor passed: a later run finds it), counted, and the run goes on.
func TestRunLeavesUntenanted(t *testing.T) {
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	_, dead, _, _ := records(t, st)
	none := letter("1", "", "poison")
	none.KeyHash, none.keyErr = "none", ErrNoTenant
	l := &lot{letters: []*Letter{none, letter("2", dead, "poison")}}
	rep, err := Run(t.Context(), l, st, Filter{}, Options{})
	if err != nil || rep.Seen != 2 || rep.Untenanted != 1 || rep.Moved != 1 || !strings.Contains(rep.String(), "1 naming no tenant (left)") {
		t.Fatalf("Run: %+v %v (%s)", rep, err, rep)
	}
	if strings.Join(l.moved, ",") != "2" || strings.Join(l.settled, ",") != "2" || len(l.passed) != 0 {
		t.Fatalf("moved %v, settled %v, passed %v; want 2 moved and settled, 1 left", l.moved, l.settled, l.passed)
	}
}
