package dedup_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/onceq/onceq/dedup"
)

func TestTruncateUTF8(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"héllo", 2, "h"},
		{"héllo", 3, "hé"},
		{"héllo", 10, "héllo"},
		{"€", 2, ""},
		{"a€", 3, "a"},
		{"a€", 4, "a€"},
		{"😀😀", 7, "😀"},
		{"\xff\xff\xff\xff\xff", 3, "\xff\xff\xff"}, // invalid bytes are no characters to keep whole
	} {
		if got := dedup.TruncateUTF8(tc.s, tc.n); got != tc.want {
			t.Errorf("TruncateUTF8(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestStorableReason(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"a\x00b", "a\uFFFDb"},
		{"cut \xe2\x82", "cut \uFFFD"},
		{"", ""},
	} {
		if got := dedup.StorableReason(tc.in); got != tc.want {
			t.Errorf("StorableReason(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Bounded at a character boundary, whatever the input.
	for _, in := range []string{strings.Repeat("é", 1<<20), strings.Repeat("\x00", 5000), strings.Repeat("a\xff", 3000)} {
		got := dedup.StorableReason(in)
		if len(got) > dedup.MaxReasonSize || len(got) < dedup.MaxReasonSize-utf8.UTFMax || !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 {
			t.Errorf("StorableReason of %d bytes: %d bytes, valid %v", len(in), len(got), utf8.ValidString(got))
		}
	}
}
