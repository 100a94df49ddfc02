package payload_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/payload"
)

func hash(t *testing.T, f func([]byte) (string, error), body string) string {
	t.Helper()
	h, err := f([]byte(body))
	if err != nil {
		t.Fatalf("hash of %s: %v", body, err)
	}
	return h
}

func TestCanonicalJSON(t *testing.T) {
	base := hash(t, payload.CanonicalJSON, `{"order_id":"A-1","qty":2,"lines":[{"sku":"x","n":1}]}`)
	if !strings.HasPrefix(base, "json:") {
		t.Fatalf("hash %q lacks its mode tag", base)
	}
	same := []string{
		"{\n  \"qty\": 2,\n  \"lines\": [ { \"n\": 1.0, \"sku\": \"x\" } ],\n  \"order_id\": \"A\\u002d1\"\n}",
		`{"lines":[{"sku":"x","n":1e0}],"qty":2.00,"order_id":"A-1"}`,
	}
	for _, b := range same {
		if h := hash(t, payload.CanonicalJSON, b); h != base {
			t.Errorf("%s hashed %s, want %s", b, h, base)
		}
	}
	other := []string{
		`{"order_id":"A-1","qty":3,"lines":[{"sku":"x","n":1}]}`,
		`{"order_id":"A-1","qty":"2","lines":[{"sku":"x","n":1}]}`,
		`{"order_id":"A-1","qty":2,"lines":[{"sku":"x","n":1}],"gift":false}`,
		`{"order_id":"a-1","qty":2,"lines":[{"sku":"x","n":1}]}`,
		`{"order_id":"A-1","qty":2,"lines":[{"sku":"x","n":1},{"sku":"y","n":1}]}`,
	}
	for _, b := range other {
		if h := hash(t, payload.CanonicalJSON, b); h == base {
			t.Errorf("%s hashed as the base payload", b)
		}
	}
	// Arrays keep their order.
	if hash(t, payload.CanonicalJSON, `[1,2]`) == hash(t, payload.CanonicalJSON, `[2,1]`) {
		t.Error("array order ignored")
	}
	if _, err := payload.CanonicalJSON([]byte(`{"order_id":`)); !errors.Is(err, payload.ErrNotJSON) {
		t.Fatalf("truncated body: %v, want ErrNotJSON", err)
	}
}

func TestJSONFields(t *testing.T) {
	f := payload.JSONFields("order_id", "lines")
	base := hash(t, f, `{"order_id":"A-1","lines":[{"sku":"x"}],"sent_at":"10:00"}`)
	if !strings.HasPrefix(base, "fields:") {
		t.Fatalf("hash %q lacks its mode tag", base)
	}
	if h := hash(t, f, `{"sent_at":"10:05","lines":[ {"sku":"x"} ],"order_id":"A-1","trace":"t"}`); h != base {
		t.Errorf("a change outside the fields changed the hash")
	}
	if h := hash(t, f, `{"order_id":"A-1","lines":[{"sku":"y"}],"sent_at":"10:00"}`); h == base {
		t.Errorf("a change inside the fields kept the hash")
	}
	// Missing, null and present differ.
	missing := hash(t, f, `{"order_id":"A-1"}`)
	null := hash(t, f, `{"order_id":"A-1","lines":null}`)
	if missing == null || missing == base || null == base {
		t.Errorf("missing %s, null %s, base %s: want three hashes", missing, null, base)
	}
	// Another path list is another mode: its tag differs.
	g := payload.JSONFields("order_id")
	other := hash(t, g, `{"order_id":"A-1","lines":[{"sku":"x"}]}`)
	if tag(other) == tag(base) {
		t.Errorf("two path lists share the tag %q", tag(base))
	}
	if tag(hash(t, payload.JSONFields("order_id", "lines"), `{}`)) != tag(base) {
		t.Errorf("one path list, two tags")
	}
	if _, err := f([]byte(`not json`)); !errors.Is(err, payload.ErrNotJSON) {
		t.Fatalf("not JSON: %v, want ErrNotJSON", err)
	}
}

func tag(h string) string { return h[:strings.LastIndexByte(h, ':')+1] }
