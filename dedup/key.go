package dedup

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The stored key of a message is "<namespace>#<key part>", one encoding
// that every Store and the COMPLETED cache use, so that no two distinct
// (namespace, key) pairs ever name one record:
//
//   - the namespace holds no '#' (NewGuard refuses one that does), so the
//     first '#' ends it;
//   - a key onceq derives from the message (the body's SHA-256, a Source's
//     default key that hashes the body, such as Kafka's fingerprint) is
//     64 lowercase hex digits, and a key part a Store could not hold is
//     stored as HashedPrefix and the hex of its SHA-256;
//   - a key a producer supplies (an attribute, a header, a KeyFunc) is kept
//     as given, unless it has one of those shapes or starts with Escape:
//     then it is stored with Escape in front. So a producer key can never
//     name a derived or hashed one, and ordinary producer keys keep the
//     stored form they always had.
//
// With a tenant (TenantKey) the stored key is "<tenant>#!#<namespace>#<key
// part>": a key part never starts with Escape and Separator (a producer
// key starting with '#' is kept as given, and an escaped key starts with
// Escape and Escape, a hex digit or 's'), so a tenant's key is never a
// key without a tenant, and keys without a tenant keep their form.
const (
	// Separator ends the namespace.
	Separator = '#'
	// Escape starts a producer key that could otherwise pass for a
	// derived or hashed key part.
	Escape = '!'
	// HashedPrefix starts a key part stored as its SHA-256 (HashPart).
	HashedPrefix = "sha256:"
)

// Key builds the stored key of a producer-supplied idempotency key (an
// attribute, a header, a KeyFunc's result) in namespace. An empty key is
// ErrEmptyKey. The key is otherwise kept as given, whatever its length or
// bytes: a Store whose medium has limits maps the part onto them with
// StorablePart.
func Key(namespace, idempotencyKey string) (string, error) {
	if idempotencyKey == "" {
		return "", ErrEmptyKey
	}
	if err := CheckNamespace(namespace); err != nil {
		return "", err
	}
	if !needsEscape(idempotencyKey) {
		return namespace + string(Separator) + idempotencyKey, nil
	}
	return namespace + string(Separator) + string(Escape) + idempotencyKey, nil
}

// AppendKey appends Key's result to dst, for a caller that looks the key
// up before deciding to keep it. The namespace is not checked (Key checks
// it); the key must not be empty.
func AppendKey(dst []byte, namespace, idempotencyKey string) []byte {
	dst = append(dst, namespace...)
	dst = append(dst, Separator)
	if needsEscape(idempotencyKey) {
		dst = append(dst, Escape)
	}
	return append(dst, idempotencyKey...)
}

// DerivedKey builds the stored key of a key onceq derived from the message
// itself: a hash that covers its body (a Source's default key such as
// Kafka's fingerprint, broker.Fingerprint, where FingerprintCoversBody
// holds). Such a
// key is 64 lowercase hex digits; anything else is taken as a producer
// key (Key), so a derived key can never pose as one either.
func DerivedKey(namespace, derived string) (string, error) {
	if !isHex64(derived) {
		return Key(namespace, derived)
	}
	if err := CheckNamespace(namespace); err != nil {
		return "", err
	}
	return namespace + string(Separator) + derived, nil
}

// needsEscape reports a producer key that has the shape of a derived or
// hashed key part, or starts with Escape.
func needsEscape(k string) bool {
	return k[0] == Escape || isHex64(k) || strings.HasPrefix(k, HashedPrefix)
}

// isHex64 reports 64 lowercase hex digits. Every Kafka record's key is
// checked, so each byte is tested without a branch: digits and letters
// of random hex would mispredict one (the figures are in BENCHMARKS.md).
func isHex64(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	ok := uint8(1)
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok &= bit(c-'0' < 10) | bit(c-'a' < 6)
	}
	return ok == 1
}

func bit(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// HashPart is the form of a key part stored as its SHA-256: HashedPrefix
// and the hex digest.
func HashPart(part string) string {
	sum := sha256.Sum256([]byte(part))
	return HashedPrefix + hex.EncodeToString(sum[:])
}

// StorablePart is part as a Store whose key attribute holds at most max
// bytes of valid UTF-8 stores it: as it is when it fits (and does not
// start with HashedPrefix), else HashPart(part). Distinct parts stay
// distinct: a kept part never starts with HashedPrefix, every hashed one
// does.
func StorablePart(part string, max int) string {
	if len(part) <= max && utf8.ValidString(part) && !strings.HasPrefix(part, HashedPrefix) {
		return part
	}
	return HashPart(part)
}

// NamespaceError is a namespace that cannot be part of a key: a
// configuration fault, reported when the consumer is built.
type NamespaceError struct{ Reason string }

func (e *NamespaceError) Error() string { return "dedup: namespace " + e.Reason }

// Is makes errors.Is(err, ErrBadNamespace) true.
func (e *NamespaceError) Is(target error) bool { return target == ErrBadNamespace }

// CheckNamespace bounds the namespace, which is configuration rather than
// message data, so that a bad one fails at once and not per message: valid
// UTF-8 of at most 256 bytes, without Separator. A *NamespaceError if not.
func CheckNamespace(namespace string) error {
	switch {
	case !utf8.ValidString(namespace) || len(namespace) > 256:
		return &NamespaceError{Reason: "must be valid UTF-8 of at most 256 bytes"}
	case strings.IndexByte(namespace, Separator) >= 0:
		return &NamespaceError{Reason: fmt.Sprintf("must not contain %q, which ends it in a stored key", Separator)}
	}
	return nil
}

// PayloadHash is the hex SHA-256 of a body: what a claim stores to detect
// key reuse, and the idempotency key of a message without one.
func PayloadHash(body []byte) string { return hashHex(body) }

// BodyKey is DerivedKey(namespace, PayloadHash(body)) together with
// PayloadHash(body), from one hash and one allocation: the hash is the
// key's tail. It is the hot path of a message without an idempotency key.
func BodyKey(namespace string, body []byte) (key, hash string, err error) {
	if err := CheckNamespace(namespace); err != nil {
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
