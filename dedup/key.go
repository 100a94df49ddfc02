package dedup

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Key builds the key "<namespace>#<idempotency key>". An empty idempotency
// key is ErrEmptyKey. The key is kept as given, whatever its length or
// bytes: a Store whose medium has limits maps keys onto them itself (the
// DynamoDB Store hashes what its key attributes cannot hold).
func Key(namespace, idempotencyKey string) (string, error) {
	if idempotencyKey == "" {
		return "", ErrEmptyKey
	}
	if err := checkNamespace(namespace); err != nil {
		return "", err
	}
	return namespace + "#" + idempotencyKey, nil
}

// checkNamespace bounds the namespace, which is configuration rather than
// message data, so that a bad one fails at once and not per message.
func checkNamespace(namespace string) error {
	if !utf8.ValidString(namespace) || len(namespace) > 256 {
		return fmt.Errorf("dedup: namespace must be valid UTF-8 of at most 256 bytes")
	}
	return nil
}

// PayloadHash is the hex SHA-256 of a body: what a claim stores to detect
// key reuse, and the idempotency key of a message without one.
func PayloadHash(body []byte) string { return hashHex(body) }

// BodyKey is Key(namespace, PayloadHash(body)) together with
// PayloadHash(body), from one hash and one allocation: the hash is the
// key's tail. It is the hot path of a message without an idempotency key.
func BodyKey(namespace string, body []byte) (key, hash string, err error) {
	if err := checkNamespace(namespace); err != nil {
		return "", "", err
	}
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

// AppendBodyKey appends BodyKey's key to dst, for a caller that looks the
// key up before deciding to keep it: built in dst, it costs no allocation.
// The namespace is not checked (BodyKey checks it).
func AppendBodyKey(dst []byte, namespace string, body []byte) []byte {
	dst = append(dst, namespace...)
	dst = append(dst, '#')
	return AppendPayloadHash(dst, body)
}

// AppendPayloadHash appends PayloadHash(body) to dst.
func AppendPayloadHash(dst []byte, body []byte) []byte {
	sum := sha256.Sum256(body)
	return hex.AppendEncode(dst, sum[:])
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
