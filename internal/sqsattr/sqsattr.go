// Package sqsattr makes strings fit to be SQS message attribute values,
// for the SQS source and the Lambda SQS dead letter alike.
package sqsattr

import (
	"strings"
	"unicode/utf8"
)

// MaxReasonBytes keeps a long error chain from eating the message size.
const MaxReasonBytes = 4096

// Reason makes reason a valid, non-empty SQS string of at most max bytes:
// control characters (but tab and line breaks) and what SQS refuses
// become '?', and it is cut at a rune boundary.
func Reason(reason string, max int) string {
	reason = strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return r
		case r < 0x20, r == 0x7F, r >= 0x80 && r < 0xA0, r >= 0xD800 && r <= 0xDFFF, r == 0xFFFE, r == 0xFFFF:
			return '?'
		}
		return r
	}, strings.ToValidUTF8(reason, "?"))
	reason = Cut(reason, max)
	if reason == "" {
		reason = "unspecified"
	}
	return reason
}

// Cut shortens s to at most max bytes at a rune boundary.
func Cut(s string, max int) string {
	if max < 0 {
		max = 0
	}
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max]
}
