package consumer

import (
	"strings"

	"github.com/onceq/onceq/dedup"
)

// PayloadHashFunc hashes a message's body for its claim. When a message
// comes with a key whose record another body already holds, the two
// hashes are compared: equal, it is a duplicate; different, the key was
// reused for another payload ([KeyReuse], dead-lettered). So the function
// decides what counts as the same payload.
//
// A hash may start with a mode tag ending in ':' ("json:…"). Two hashes
// are compared only when their tags, the text up to the last ':', are
// equal: after a change of mode, records stored under the old one are not
// checked, rather than all taken for reused keys. An empty hash is not
// compared with the stored one; a record stored with none is never the
// same payload as a message with one. An error is the message's
// fault (a body a JSON mode cannot parse): it is dead-lettered with the
// error as reason.
//
// Package payload has hashes for JSON bodies: payload.CanonicalJSON and
// payload.JSONFields.
type PayloadHashFunc func(body []byte) (string, error)

// WholeBody is the default PayloadHashFunc: the hex SHA-256 of the body's
// bytes, untagged. Any byte of difference, a space or another member
// order, is another payload.
func WholeBody(body []byte) (string, error) { return dedup.PayloadHash(body), nil }

// WithPayloadHash sets how a message's payload is hashed for its claim,
// which decides what counts as the same payload under one key (default
// WholeBody). It does not apply when the key is itself the body's hash,
// since the same key then means the same body.
func WithPayloadHash(f PayloadHashFunc) GuardOption {
	return guardFunc(func(c *config) { c.payloadHash, c.noPayloadCheck = f, false })
}

// WithoutPayloadCheck stores no payload hash: a key seen again is a duplicate,
// whatever its body.
func WithoutPayloadCheck() GuardOption {
	return guardFunc(func(c *config) { c.payloadHash, c.noPayloadCheck = noPayloadHash, true })
}

func noPayloadHash([]byte) (string, error) { return "", nil }

// hashesDiffer reports a stored payload hash and a new one that differ
// under the same mode tag. No new hash (the key covers the body, or the
// PayloadHashFunc gave none) is not compared; no stored hash is never the
// same payload as a new one.
func hashesDiffer(stored, current string) bool {
	switch {
	case stored == current || current == "":
		return false
	case stored == "":
		return true
	}
	return stored[:strings.LastIndexByte(stored, ':')+1] == current[:strings.LastIndexByte(current, ':')+1]
}
