package payload

import (
	"errors"
	"fmt"
	"strings"

	"github.com/onceq/onceq/broker"
	"github.com/tidwall/gjson"
)

// Errors of the package. Test with errors.Is.
var (
	// ErrNotJSON: the body is not valid JSON.
	ErrNotJSON = errors.New("payload: body is not valid JSON")
	// ErrNoKey: the path finds no value usable as a key (missing, null, an
	// empty string, object or array).
	ErrNoKey = errors.New("payload: no key value (missing, null or empty)")
)

// KeyError is what a [JSONKey] function returns for a body it cannot take
// a key from. Its text names the path, never the body or a value. The
// message is at fault, not the infrastructure: the consumer dead-letters
// it at once.
type KeyError struct {
	// Path is the path that found no key, or the first path when the body
	// is not JSON.
	Path string
	// Err is ErrNotJSON or ErrNoKey.
	Err error
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("payload: key path %q: %s", e.Path, strings.TrimPrefix(e.Err.Error(), "payload: "))
}

// Unwrap makes errors.Is(err, ErrNoKey) and errors.Is(err, ErrNotJSON) work.
func (e *KeyError) Unwrap() error { return e.Err }

// JSONKey returns a key function that takes a message's idempotency key
// from its JSON body, at path (a GJSON path such as "order.id"):
//
//   - a string is the key as it is (decoded: "A\u002d1" is A-1);
//   - a number is its decimal value: 42, 42.0 and 4.2e1 are all "42";
//   - true and false are "true" and "false";
//   - an object or array is its canonical JSON text (see [CanonicalJSON]):
//     key order and whitespace do not change the key;
//   - missing, null, "", {} and [] are no key: a *KeyError wrapping
//     ErrNoKey, and a body that is not JSON one wrapping ErrNotJSON.
//
// With more paths the key is the canonical JSON array of every path's
// value, in order (`["A-1",3]`), and each must have a value: two
// different selections never make one key.
//
// Paths are part of the program, so a path that can never match is a
// programming error: JSONKey panics on an empty one. GJSON accepts any
// other text as a path, so check a new path against a sample body in a
// test.
func JSONKey(path string, more ...string) broker.KeyFunc {
	paths := append([]string{path}, more...)
	mustPaths("JSONKey", paths)
	if len(more) == 0 {
		return func(m *broker.Message) (string, error) {
			if !gjson.ValidBytes(m.Body) {
				return "", &KeyError{Path: path, Err: ErrNotJSON}
			}
			r := gjson.GetBytes(m.Body, path)
			if empty(r) {
				return "", &KeyError{Path: path, Err: ErrNoKey}
			}
			switch r.Type {
			case gjson.String:
				return r.Str, nil
			case gjson.True, gjson.False:
				return r.Raw, nil
			}
			return string(appendCanonical(nil, r)), nil
		}
	}
	return func(m *broker.Message) (string, error) {
		if !gjson.ValidBytes(m.Body) {
			return "", &KeyError{Path: path, Err: ErrNotJSON}
		}
		b := []byte{'['}
		for i, r := range gjson.GetManyBytes(m.Body, paths...) {
			if empty(r) {
				return "", &KeyError{Path: paths[i], Err: ErrNoKey}
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCanonical(b, r)
		}
		return string(append(b, ']')), nil
	}
}

// empty reports a value that cannot be a key.
func empty(r gjson.Result) bool {
	switch r.Type {
	case gjson.Null:
		return true // null, or missing
	case gjson.String:
		return r.Str == ""
	case gjson.JSON:
		n := 0
		r.ForEach(func(_, _ gjson.Result) bool { n++; return false })
		return n == 0
	}
	return false
}

func mustPaths(fn string, paths []string) {
	for _, p := range paths {
		if p == "" {
			panic("payload: " + fn + ": empty path")
		}
	}
}
