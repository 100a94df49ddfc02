package httpidem

import (
	"strings"
	"testing"
)

// The key is one Structured Field String of printable ASCII, with only \"
// and \\ escaped, of 1 to MaxKeyLength characters; anything else is
// refused with a reason that names what was wrong and never holds the key.
func TestParseKey(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLength)
	for _, c := range []struct {
		in   []string
		want string // the key, or a part of the refusal
		ok   bool
	}{
		{[]string{`"8e03978e-40d5"`}, "8e03978e-40d5", true},
		{[]string{` "a\"b\\c" `}, `a"b\c`, true},
		{[]string{`"with space ~!"`}, "with space ~!", true},
		{[]string{`"` + long + `"`}, long, true},
		{[]string{`"` + long + `k"`}, "256 characters long; at most 255", false},
		{[]string{`"` + strings.Repeat("x", 300) + `"`}, "300 characters long", false},
		{nil, "requires an Idempotency-Key", false},
		{[]string{"a", "b"}, "2 Idempotency-Key header fields", false},
		{[]string{""}, "empty", false},
		{[]string{`""`}, "empty string", false},
		{[]string{`"unterminated`}, "no closing quote", false},
		{[]string{`"unterminated\"`}, "no closing quote", false},
		{[]string{`"a\`}, "backslash", false},
		{[]string{`"a\nb"`}, "backslash", false},
		{[]string{`:Ynl0ZXM=:`}, "a byte sequence", false},
		{[]string{`12345`}, "a number", false},
		{[]string{`-1.5`}, "a number", false},
		{[]string{`?bad`}, "a boolean", false},
		{[]string{`?1`}, "a boolean", false},
		{[]string{`@1659578233`}, "a date", false},
		{[]string{`%"caf%c3%a9"`}, "a display string", false},
		{[]string{`7f2e91aa`}, "a number", false},
		{[]string{`abc`}, "a bare token", false},
		{[]string{`(a b)`}, "not a structured-field item", false},
		{[]string{`"a";p=1`}, "after its closing quote", false},
		{[]string{`"a", "b"`}, "after its closing quote", false},
		{[]string{"\"a\tb\""}, "outside printable ASCII", false},
		{[]string{"\"a\x00b\""}, "outside printable ASCII", false},
		{[]string{"\"caf\xc3\xa9\""}, "outside printable ASCII", false},
	} {
		got, err := parseKey(c.in)
		switch {
		case c.ok && (err != nil || got != c.want):
			t.Errorf("parseKey(%q) = %q, %v; want %q", c.in, got, err, c.want)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("parseKey(%q) = %q, %v; want a refusal saying %q", c.in, got, err, c.want)
		case !c.ok && len(c.in) == 1 && len(c.in[0]) > 3 && strings.Contains(err.Error(), strings.Trim(c.in[0], `" `)):
			t.Errorf("parseKey(%q): the refusal %q holds the key", c.in, err)
		}
	}
}
