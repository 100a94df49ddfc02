package dedup

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode/utf8"
)

// MaxKeyLen is the longest key stored as given (DynamoDB's partition key
// limit); longer keys, and keys that are not valid UTF-8, are hashed.
const MaxKeyLen = 2048

// hashedPrefix marks a key that was replaced by its hash.
const hashedPrefix = "sha256:"

// Key builds the stored key "<namespace>#<idempotency key>". An empty
// idempotency key is ErrEmptyKey. A key that would exceed MaxKeyLen, or is
// not valid UTF-8 (DynamoDB strings must be), is replaced by its SHA-256, so
// every input maps to a storable key and distinct inputs stay distinct.
func Key(namespace, idempotencyKey string) (string, error) {
	if idempotencyKey == "" {
		return "", ErrEmptyKey
	}
	if !utf8.ValidString(namespace) || len(namespace) > 256 {
		return "", fmt.Errorf("dedup: namespace must be valid UTF-8 of at most 256 bytes")
	}
	if len(namespace)+1+len(idempotencyKey) > MaxKeyLen || !utf8.ValidString(idempotencyKey) {
		idempotencyKey = hashedPrefix + hashHex([]byte(idempotencyKey))
	}
	return namespace + "#" + idempotencyKey, nil
}

// BodyFingerprint is the default idempotency key of a message without one:
// the SHA-256 of its body.
func BodyFingerprint(body []byte) string { return hashHex(body) }

// PayloadHash is what a claim stores to detect key reuse.
func PayloadHash(body []byte) string { return hashHex(body) }

func hashHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
