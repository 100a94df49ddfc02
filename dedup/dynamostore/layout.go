package dynamostore

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/retry"
)

// ErrBadKey: a key the table layout cannot store. The error is a
// *BadKeyError or a *dedup.KeyTooLongError.
var ErrBadKey = errors.New("dynamostore: key not storable in this table layout")

// BadKeyError is a key without the <tenant>#<fingerprint> shape the tenant
// layout needs. It is the message's fault (Permanent), never retried.
type BadKeyError struct {
	KeyHash string // dedup.KeyHash of the key
}

func (e *BadKeyError) Error() string {
	return fmt.Sprintf("%s: key_hash %s: the tenant layout needs <tenant>#<fingerprint>", ErrBadKey, e.KeyHash)
}

// Is makes errors.Is(err, ErrBadKey) true.
func (e *BadKeyError) Is(target error) bool { return target == ErrBadKey }

// RetryClass: the key will never fit.
func (e *BadKeyError) RetryClass() retry.Class { return retry.Permanent }

// hashedPrefix marks a key part stored as its hash: dedup's, the one
// encoding every Store and the cache share.
const hashedPrefix = dedup.HashedPrefix

// layout maps a dedup key to the item's primary key. It knows DynamoDB's
// key limits (partition key 2048 bytes, sort key 1024, UTF-8 strings): a
// part that is too long or not UTF-8 is stored as "sha256:" and the hex of
// its SHA-256, so every key maps to one storable item, always the same one,
// and distinct keys stay distinct. A part that already starts with
// "sha256:" is hashed too, so no given key can pose as another's hash.
//
// What is hashed is the fingerprint, the part after the first '#' (keys
// come from dedup.Key as <namespace>#<key>): the namespace stays readable,
// and the default layout stores what dedup.Key produced before the rule
// moved here.
//
// shards > 1 (TenantShards) spreads a tenant over that many partition
// keys, "<tenant>#<n>", n from a hash of the sort key.
type layout struct {
	tenant bool
	shards int
}

func (l layout) key(k string) (map[string]types.AttributeValue, error) {
	if k == "" {
		return nil, dedup.ErrEmptyKey
	}
	ns, fp, ok := strings.Cut(k, "#")
	if !l.tenant {
		return map[string]types.AttributeValue{attrPK: str(partitionKey(k, ns, fp, ok))}, nil
	}
	if !ok || ns == "" || fp == "" {
		return nil, &BadKeyError{KeyHash: dedup.KeyHash(k)}
	}
	maxTenant := maxPartitionKey - len(shardSuffix(l.shards, ""))
	switch {
	case !utf8.ValidString(ns) || strings.HasPrefix(ns, hashedPrefix):
		ns = hashKey(ns)
	case len(ns) > maxTenant:
		// Hashing the tenant would scatter a tenant's records, which the
		// layout exists to keep together: refuse the key instead.
		return nil, &dedup.KeyTooLongError{KeyHash: dedup.KeyHash(k), Part: "tenant", Len: len(ns), Max: maxTenant}
	}
	if !storable(fp, maxSortKey) {
		fp = hashKey(fp)
	}
	return map[string]types.AttributeValue{attrPK: str(ns + shardSuffix(l.shards, fp)), attrSK: str(fp)}, nil
}

// partitionKey is the default layout's pk of k = ns#fp (ok: k has a '#').
// A hashed whole key has no '#' and a kept one no "sha256:" after its
// first '#', so the three shapes never meet.
func partitionKey(k, ns, fp string, ok bool) string {
	const hashedLen = len(hashedPrefix) + 2*sha256.Size
	switch {
	case !ok && storable(k, maxPartitionKey):
		return k
	case !ok:
		return hashKey(k)
	case len(k) <= maxPartitionKey && utf8.ValidString(k) && !strings.HasPrefix(fp, hashedPrefix):
		return k
	case len(ns)+len("#")+hashedLen <= maxPartitionKey && utf8.ValidString(ns):
		return ns + "#" + hashKey(fp)
	default:
		return hashKey(k)
	}
}

// storable reports whether s can be a key attribute of at most max bytes
// as it is (dedup.StorablePart keeps it).
func storable(s string, max int) bool { return dedup.StorablePart(s, max) == s }

func hashKey(s string) string { return dedup.HashPart(s) }

// notExists writes the "absent" arm of a claim condition. One key
// attribute would do (the condition is evaluated on the one item of that
// primary key), but naming both keeps the tenant layout's intent explicit.
func (l layout) notExists(r *request) {
	if l.tenant {
		r.Where("(attribute_not_exists(", r.name(nPK), ") AND attribute_not_exists(", r.name(nSK), "))")
		return
	}
	r.Where("attribute_not_exists(", r.name(nPK), ")")
}

// shardSuffix is "#<n>" for a sort key sk among shards write shards, n
// from a stable hash of sk; "" without sharding. With sk "" it is the
// longest suffix, for the length check.
func shardSuffix(shards int, sk string) string {
	if shards <= 1 {
		return ""
	}
	if sk == "" {
		return "#" + strconv.Itoa(shards-1)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(sk))
	return "#" + strconv.Itoa(int(h.Sum32()%uint32(shards)))
}
