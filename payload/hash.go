package payload

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/tidwall/gjson"
)

// The payload hashes of this package start with a mode tag. The consumer
// compares two payload hashes only when their tags (the text up to the
// last ':') are equal, so records written under another mode, or another
// set of fields, are never mistaken for a reused key.
const (
	canonicalTag = "json:"
	fieldsTag    = "fields:"
)

// CanonicalJSON is a payload hash (for consumer.WithPayloadHash) under
// which two JSON bodies are the same payload when they hold the same
// value: the order of object members and whitespace do not matter,
// strings compare after decoding ("\u0041" is "A"), and numbers by exact
// decimal value (1, 1.0 and 1e0 are equal; nothing is rounded, so large
// integers stay apart). Arrays keep their order. An object that repeats a
// member name keeps its repeats in order. A body that is not JSON is
// ErrNotJSON: the message's fault.
//
// It costs a parse of the body and a copy of it, where the default hashes
// the bytes as they are.
func CanonicalJSON(body []byte) (string, error) {
	if !gjson.ValidBytes(body) {
		return "", ErrNotJSON
	}
	c := appendCanonical(make([]byte, 0, len(body)), gjson.Parse(string(body)))
	return canonicalTag + sum(c), nil
}

// JSONFields returns a payload hash (for consumer.WithPayloadHash) that
// looks only at the values at the paths given (GJSON paths, as in
// [JSONKey]): a redelivery whose other fields changed (a timestamp, a
// trace ID) is the same payload, and one whose named fields changed is a
// reused key. Values compare as in [CanonicalJSON]; a missing field is
// distinct from null and from every value. A body that is not JSON is
// ErrNotJSON.
//
// Its hashes are tagged with a hash of the path list, so changing the
// paths makes records written under the old list unchecked rather than
// reused. It panics on an empty path, as JSONKey does.
func JSONFields(path string, more ...string) func(body []byte) (string, error) {
	paths := append([]string{path}, more...)
	mustPaths("JSONFields", paths)
	var list []byte
	for _, p := range paths {
		list = strconv.AppendInt(list, int64(len(p)), 10)
		list = append(list, ':')
		list = append(list, p...)
	}
	listSum := sha256.Sum256(list)
	tag := fieldsTag + hex.EncodeToString(listSum[:4]) + ":"
	return func(body []byte) (string, error) {
		if !gjson.ValidBytes(body) {
			return "", ErrNotJSON
		}
		var b []byte
		for _, r := range gjson.GetManyBytes(body, paths...) {
			// A canonical value is never empty and never holds a raw
			// newline, so an empty line is a missing field.
			if r.Exists() {
				b = appendCanonical(b, r)
			}
			b = append(b, '\n')
		}
		return tag + sum(b), nil
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
