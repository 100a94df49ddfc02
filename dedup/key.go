package dedup

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
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
	if err := checkNamespace(namespace); err != nil {
		return "", err
	}
	if len(namespace)+1+len(idempotencyKey) > MaxKeyLen || !utf8.ValidString(idempotencyKey) {
		idempotencyKey = hashedPrefix + hashHex([]byte(idempotencyKey))
	}
	return namespace + "#" + idempotencyKey, nil
}

func checkNamespace(namespace string) error {
	if !utf8.ValidString(namespace) || len(namespace) > 256 {
		return fmt.Errorf("dedup: namespace must be valid UTF-8 of at most 256 bytes")
	}
	return nil
}

// BodyFingerprint is the default idempotency key of a message without one:
// the SHA-256 of its body.
func BodyFingerprint(body []byte) string { return hashHex(body) }

// PayloadHash is what a claim stores to detect key reuse.
func PayloadHash(body []byte) string { return hashHex(body) }

// BodyKey is Key(namespace, BodyFingerprint(body)) together with
// PayloadHash(body), from one hash and one allocation: the hash is the
// key's tail. It is the hot path of a message without an idempotency key.
func BodyKey(namespace string, body []byte) (key, hash string, err error) {
	if err := checkNamespace(namespace); err != nil {
		return "", "", err
	}
	// A namespace of at most 256 bytes leaves room for the hex hash, so
	// the key is never hashed again.
	const hexLen = 2 * sha256.Size
	sum := sha256.Sum256(body)
	var hx [hexLen]byte
	hex.Encode(hx[:], sum[:])
	var b strings.Builder // its String does not copy: one allocation
	b.Grow(len(namespace) + 1 + hexLen)
	b.WriteString(namespace)
	b.WriteByte('#')
	b.Write(hx[:])
	key = b.String()
	return key, key[len(namespace)+1:], nil
}

// KeyHash is what logs and error texts carry instead of a key, which may
// hold personal data: the first 12 hex digits of its SHA-256, enough to
// find the record (onceq inspect -key-hash) and to tell keys apart.
func KeyHash(key string) string {
	if key == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

func hashHex(b []byte) string {
	sum := sha256.Sum256(b)
	var buf [2 * sha256.Size]byte
	hex.Encode(buf[:], sum[:])
	return string(buf[:]) // one allocation, where hex.EncodeToString makes two
}
