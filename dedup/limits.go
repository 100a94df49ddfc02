package dedup

import (
	"strings"
	"unicode/utf8"
)

// DefaultMaxResponseSize is the longest response a Store keeps unless its
// MaxResponseSize option says otherwise: 256 KiB. Every duplicate's claim
// reads the response back, so a cached answer is meant to be small (an ID,
// a status, a summary); the bound is below DynamoDB's 400 KB item limit so
// that one default fits every Store.
const DefaultMaxResponseSize = 256 << 10

// MaxReasonSize is the longest failure reason a Store keeps, in bytes.
const MaxReasonSize = 1024

// StorableReason is reason as every Store keeps it: valid UTF-8, with
// invalid bytes and NUL (which a PostgreSQL text column refuses) replaced
// by U+FFFD, cut at a character boundary to at most MaxReasonSize bytes.
// Stores apply it in Fail, so that any reason lands.
func StorableReason(reason string) string {
	if len(reason) > 4*MaxReasonSize {
		// Cleaning only what can be kept: the cut below never needs more.
		reason = reason[:4*MaxReasonSize]
	}
	if !utf8.ValidString(reason) {
		reason = strings.ToValidUTF8(reason, "\uFFFD")
	}
	if strings.IndexByte(reason, 0) >= 0 {
		reason = strings.ReplaceAll(reason, "\x00", "\uFFFD")
	}
	return TruncateUTF8(reason, MaxReasonSize)
}

// TruncateUTF8 cuts s to at most n bytes without splitting a character
// (a cut through one drops its leading bytes too).
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	// Back up over continuation bytes to the start of the cut character
	// (at most UTFMax-1 of them); keep it if it ends within n.
	for i > 0 && i > n-utf8.UTFMax && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// DefaultTable is the records table of every Store that keeps its records
// in a table (the DynamoDB and PostgreSQL stores) unless its WithTable
// option names another: "onceq_records", a name both databases accept.
const DefaultTable = "onceq_records"
