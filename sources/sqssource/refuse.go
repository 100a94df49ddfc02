package sqssource

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/outbox"
)

// SQS's bounds on names (maxAttributes is in settle.go).
const (
	maxAttributeName = 256
	maxQueueName     = 80
	maxGroupID       = 128
)

// refusal is the *outbox.RefusedError for an entry SQS never takes, or
// nil: one no destination takes (outbox.Refusal), a Destination that is no
// queue URL, or a message SQS refuses for what it holds. Such an entry is
// refused before it is sent: SQS may refuse it for the whole call, and
// the entries beside it with it.
func refusal(e *outbox.Entry) error {
	if err := outbox.Refusal(e); err != nil {
		return err
	}
	reason := queueURLProblem(e.Destination)
	if reason == "" {
		reason = messageProblem(e)
	}
	if reason != "" {
		return &outbox.RefusedError{Destination: e.Destination, Reason: reason}
	}
	return nil
}

// queueURLProblem says why dest is no SQS queue URL, or "": a queue URL
// is http or https, names a host, and ends in a queue name (1 to 80 ASCII
// letters, digits, '-' and '_', a FIFO queue's with ".fifo").
func queueURLProblem(dest string) string {
	u, err := url.Parse(dest)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "not an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<queue>)"
	}
	name := u.Path[strings.LastIndexByte(u.Path, '/')+1:]
	base := strings.TrimSuffix(name, ".fifo")
	if base == "" || len(name) > maxQueueName || strings.ContainsFunc(base, func(r rune) bool { return !nameChar(r) }) {
		return "not an SQS queue URL: it does not end in a queue name (1 to 80 letters, digits, '-' and '_')"
	}
	return ""
}

// messageProblem says why SQS refuses e's message for what it holds, or
// "".
func messageProblem(e *outbox.Entry) string {
	switch {
	case len(e.Body) == 0:
		return "SQS takes no empty message body"
	case !utf8.Valid(e.Body):
		return "SQS carries text, and the body is not valid UTF-8"
	}
	if at, r := invalidChar(string(e.Body)); at >= 0 {
		return fmt.Sprintf("the body holds %s at byte %d, a character SQS refuses", strconv.QuoteRuneToASCII(r), at)
	}
	n := 1 // the idempotency-key attribute
	for k, v := range e.Headers {
		if k == broker.IdempotencyKeyAttribute {
			continue // the entry's ID replaces it
		}
		n++
		if reason := attributeProblem(k, v); reason != "" {
			return reason
		}
	}
	if n > maxAttributes {
		return fmt.Sprintf("%d headers: SQS takes %d message attributes, one of which is the %s", n-1, maxAttributes, broker.IdempotencyKeyAttribute)
	}
	if reason := attributeProblem(broker.IdempotencyKeyAttribute, e.ID); reason != "" {
		return "the entry's ID: " + reason
	}
	return ""
}

// attributeProblem says why SQS refuses a String message attribute name =
// value, or "".
func attributeProblem(name, value string) string {
	lower := strings.ToLower(name)
	switch {
	case name == "" || len(name) > maxAttributeName:
		return fmt.Sprintf("header name of %d characters: SQS takes 1 to %d", len(name), maxAttributeName)
	case strings.ContainsFunc(name, func(r rune) bool { return !nameChar(r) && r != '.' }):
		return fmt.Sprintf("header %s: SQS takes attribute names of letters, digits, '-', '_' and '.'", strconv.QuoteToASCII(name))
	case strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon."):
		return fmt.Sprintf("header %q: SQS reserves the prefixes AWS. and Amazon.", name)
	case strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, ".."):
		return fmt.Sprintf("header %q: SQS takes no attribute name that begins or ends with '.', or holds \"..\"", name)
	case value == "":
		return fmt.Sprintf("header %q is empty: SQS takes no empty attribute value", name)
	case !utf8.ValidString(value):
		return fmt.Sprintf("header %q is not valid UTF-8", name)
	}
	if at, r := invalidChar(value); at >= 0 {
		return fmt.Sprintf("header %q holds %s at byte %d, a character SQS refuses", name, strconv.QuoteRuneToASCII(r), at)
	}
	return ""
}

// invalidChar is the first character of s outside those SQS takes in a
// message (#x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD, #x10000 to
// #x10FFFF), and its byte offset; -1 when there is none.
func invalidChar(s string) (int, rune) {
	for i, r := range s {
		switch {
		case r == '\t' || r == '\n' || r == '\r',
			r >= 0x20 && r <= 0xD7FF,
			r >= 0xE000 && r <= 0xFFFD,
			r >= 0x10000 && r <= 0x10FFFF:
		default:
			return i, r
		}
	}
	return -1, 0
}

// nameChar is a character of a queue name.
func nameChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
}

// validGroup reports whether SQS takes key as a MessageGroupId: 1 to 128
// ASCII letters, digits and punctuation.
func validGroup(key string) bool {
	if key == "" || len(key) > maxGroupID {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7E {
			return false
		}
	}
	return true
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
