package httpidem

import (
	"fmt"
	"strings"
)

// MaxKeyLength is the longest Idempotency-Key accepted, in characters of
// the string's content (its quotes and escapes not counted): the limit
// payment APIs use. A longer key is refused with 400.
const MaxKeyLength = 255

// keyError says why an Idempotency-Key field was refused. Its text is the
// 400 problem's detail; it never holds the key.
type keyError string

func (e keyError) Error() string { return string(e) }

// quoteHint is how a client sends a key, for the refusals of a value that
// is not a string at all.
const quoteHint = `; send it as a quoted string, as in Idempotency-Key: "8e03978e-40d5"`

// parseKey reads the one Idempotency-Key field. The draft defines its
// value as a Structured Field String (RFC 9651): DQUOTE, printable ASCII
// (0x20-0x7E) with only \" and \\ escaped, DQUOTE. Nothing else is taken:
// no bare token (an unquoted key that starts with a digit would be an
// Integer, so a client's random keys would pass or fail by their first
// character), no parameters, no list.
func parseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", keyError("this operation requires an Idempotency-Key header field" + quoteHint)
	case 1:
	default:
		return "", keyError(fmt.Sprintf("the request has %d Idempotency-Key header fields; send exactly one", len(values)))
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", keyError("the Idempotency-Key header field is empty" + quoteHint)
	}
	if v[0] != '"' {
		return "", keyError("the Idempotency-Key is " + itemKind(v[0]) + ", not a string" + quoteHint)
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", keyError(`a backslash in the Idempotency-Key may only escape " or \`)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", keyError("the Idempotency-Key has more after its closing quote; send one string, without parameters")
			}
			k := b.String()
			switch {
			case k == "":
				return "", keyError("the Idempotency-Key is an empty string")
			case len(k) > MaxKeyLength:
				return "", keyError(fmt.Sprintf("the Idempotency-Key is %d characters long; at most %d are accepted", len(k), MaxKeyLength))
			}
			return k, nil
		case c < 0x20 || c > 0x7e:
			return "", keyError(fmt.Sprintf("the Idempotency-Key holds a byte outside printable ASCII (0x20-0x7E) at position %d", i))
		default:
			b.WriteByte(c)
		}
	}
	return "", keyError("the Idempotency-Key's string has no closing quote")
}

// itemKind names the structured-field item a value starting with c would
// be (RFC 9651), for a refusal that says what was sent instead.
func itemKind(c byte) string {
	switch {
	case c == '-' || (c >= '0' && c <= '9'):
		return "a number"
	case c == ':':
		return "a byte sequence"
	case c == '?':
		return "a boolean"
	case c == '@':
		return "a date"
	case c == '%':
		return "a display string"
	case c == '*' || (c|0x20 >= 'a' && c|0x20 <= 'z'):
		return "a bare token"
	}
	return "not a structured-field item"
}
