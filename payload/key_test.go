package payload_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/payload"
)

func key(t *testing.T, f broker.KeyFunc, body string) (string, error) {
	t.Helper()
	return f(&broker.Message{Body: []byte(body)})
}

func TestJSONKeyValues(t *testing.T) {
	cases := []struct {
		name, path, body, want string
	}{
		{"string", "order_id", `{"order_id":"A-1","qty":2}`, "A-1"},
		{"escaped string", "order_id", `{"order_id":"A\u002d1"}`, "A-1"},
		{"nested", "order.id", `{"order":{"id":"A-7","lines":[]}}`, "A-7"},
		{"array index", "items.1.sku", `{"items":[{"sku":"x"},{"sku":"y"}]}`, "y"},
		{"escaped dot", `meta.trace\.id`, `{"meta":{"trace.id":"t-1"}}`, "t-1"},
		{"integer", "n", `{"n":12345}`, "12345"},
		{"integer written as float", "n", `{"n":12345.0}`, "12345"},
		{"exponent", "n", `{"n":1.2345e4}`, "12345"},
		{"fraction", "n", `{"n":-0.50}`, "-0.5"},
		{"large integer kept exact", "n", `{"n":12345678901234567891}`, "12345678901234567891"},
		{"bool", "b", `{"b":false}`, "false"},
		{"object by canonical text", "o", `{"o": { "b" : 2, "a" : [1.0, "x"] }}`, `{"a":[1,"x"],"b":2}`},
		{"whole body", "@this", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := key(t, payload.JSONKey(c.path), c.body)
			if err != nil || got != c.want {
				t.Fatalf("JSONKey(%q) on %s = %q, %v; want %q", c.path, c.body, got, err, c.want)
			}
		})
	}
}

func TestJSONKeySeveralPaths(t *testing.T) {
	f := payload.JSONKey("order_id", "line")
	got, err := key(t, f, `{"line":3,"order_id":"A-1"}`)
	if err != nil || got != `["A-1",3]` {
		t.Fatalf("got %q, %v", got, err)
	}
	// Values that would run together if simply joined stay apart.
	a, _ := key(t, f, `{"order_id":"a|b","line":"c"}`)
	b, _ := key(t, f, `{"order_id":"a","line":"b|c"}`)
	if a == b {
		t.Fatalf("two selections made one key %q", a)
	}
	_, err = key(t, f, `{"order_id":"A-1"}`)
	var ke *payload.KeyError
	if !errors.As(err, &ke) || ke.Path != "line" || !errors.Is(err, payload.ErrNoKey) {
		t.Fatalf("missing second path: %v", err)
	}
}

func TestJSONKeyErrors(t *testing.T) {
	const secret = "4111-1111-1111-1111"
	cases := []struct {
		name, body string
		want       error
	}{
		{"missing", `{"card":"` + secret + `"}`, payload.ErrNoKey},
		{"null", `{"id":null,"card":"` + secret + `"}`, payload.ErrNoKey},
		{"empty string", `{"id":"","card":"` + secret + `"}`, payload.ErrNoKey},
		{"empty object", `{"id":{},"card":"` + secret + `"}`, payload.ErrNoKey},
		{"empty array", `{"id":[ ],"card":"` + secret + `"}`, payload.ErrNoKey},
		{"not JSON", `id=` + secret, payload.ErrNotJSON},
		{"truncated JSON", `{"id":"` + secret + `"`, payload.ErrNotJSON},
		{"empty body", ``, payload.ErrNotJSON},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := key(t, payload.JSONKey("id"), c.body)
			if got != "" || !errors.Is(err, c.want) {
				t.Fatalf("got %q, %v; want %v", got, err, c.want)
			}
			var ke *payload.KeyError
			if !errors.As(err, &ke) || ke.Path != "id" {
				t.Fatalf("%v is not a *KeyError naming the path", err)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "card") {
				t.Fatalf("error text %q holds body content", err)
			}
			if !strings.Contains(err.Error(), `"id"`) {
				t.Fatalf("error text %q does not name the path", err)
			}
		})
	}
	// A key that is found never shows up in an error of another path.
	_, err := key(t, payload.JSONKey("id", "missing"), `{"id":"`+secret+`"}`)
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("error %v", err)
	}
}

func TestJSONKeyRefusesEmptyPath(t *testing.T) {
	for _, paths := range [][]string{{""}, {"id", ""}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("JSONKey(%q) did not panic", paths)
				}
			}()
			payload.JSONKey(paths[0], paths[1:]...)
		}()
	}
}
