// Package items is the format of a records table's items, which the
// store writes and its auditor reads: the attribute names, their encoding,
// and the decoding of an item into a dedup.Record.
package items

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
)

// Attribute names of a record.
const (
	AttrPK       = "pk"
	AttrSK       = "sk"
	AttrStatus   = "status"
	AttrVersion  = "version"
	AttrOwner    = "owner"
	AttrPayload  = "payload_hash"
	AttrAttempts = "attempts"
	AttrCreated  = "created_at"
	AttrExpires  = "expires_at"
	AttrLease    = "lease_expires_at"
	AttrResponse = "response"
	AttrError    = "error"
	// AttrTakeovers counts the takeovers of an abandoned lease; absent is
	// none (a new record does not write it).
	AttrTakeovers = "takeovers"
)

// Attributes of an archive tombstone, besides the record's own key,
// owner, version and payload_hash (expires_at is the archive's TTL).
const (
	AttrRemovedAt = "removed_at"
	// AttrArchived marks a record a claim completed from a tombstone: no
	// handler ran, so the audit trail neither archives it again nor counts
	// it as a second completion.
	AttrArchived = "archived"
)

// MaxEpoch is the end of year 9999; later times are not plausible.
const MaxEpoch = 253402300799

// Str is a string attribute.
func Str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// Num is a number attribute.
func Num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// CeilUnix rounds an expiry up: a record never expires before asked.
func CeilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// FloorUnix rounds a "now" down: nothing is seen as expired early.
func FloorUnix(t time.Time) int64 { return t.Unix() }

// DecodeRecord turns a stored item into a Record. It is total: any missing
// or mistyped attribute is a *dedup.CorruptRecordError, never a panic.
func DecodeRecord(m map[string]types.AttributeValue) (dedup.Record, error) {
	r, err := decodeItem(m)
	if err != nil {
		e := &dedup.CorruptRecordError{Err: err}
		if pk, _ := m[AttrPK].(*types.AttributeValueMemberS); pk != nil {
			k := pk.Value
			if sk, _ := m[AttrSK].(*types.AttributeValueMemberS); sk != nil {
				k = Unshard(k) + "#" + sk.Value
			}
			e.KeyHash = dedup.KeyHash(k)
		}
		return r, e
	}
	return r, nil
}

func decodeItem(m map[string]types.AttributeValue) (dedup.Record, error) {
	var r dedup.Record
	if len(m) == 0 {
		return r, errors.New("dynamostore: empty item")
	}
	pk, err := GetS(m, AttrPK, true)
	if err != nil {
		return r, err
	}
	if pk == "" {
		return r, errors.New("dynamostore: empty pk")
	}
	r.Key = pk
	if _, ok := m[AttrSK]; ok {
		sk, err := GetS(m, AttrSK, true)
		if err != nil {
			return r, err
		}
		// The key the consumer claimed, whose hash its logs carry: a
		// TenantShards partition key's shard is not part of it.
		r.Key = Unshard(pk) + "#" + sk
	}
	status, err := GetS(m, AttrStatus, true)
	if err != nil {
		return r, err
	}
	switch s := dedup.Status(status); s {
	case dedup.StatusPending, dedup.StatusCompleted, dedup.StatusFailed, dedup.StatusDeadLetter:
		r.Status = s
	default:
		return r, fmt.Errorf("dynamostore: unknown status %q", status)
	}
	if r.Version, err = GetN(m, AttrVersion, true, 0, 1<<62); err != nil {
		return r, err
	}
	if r.Owner, err = GetS(m, AttrOwner, true); err != nil {
		return r, err
	}
	if r.PayloadHash, err = GetS(m, AttrPayload, true); err != nil {
		return r, err
	}
	attempts, err := GetN(m, AttrAttempts, true, 0, 1<<31-1)
	if err != nil {
		return r, err
	}
	r.Attempts = int(attempts)
	created, err := GetN(m, AttrCreated, true, 0, MaxEpoch)
	if err != nil {
		return r, err
	}
	r.CreatedAt = time.Unix(created, 0)
	expires, err := GetN(m, AttrExpires, true, 0, MaxEpoch)
	if err != nil {
		return r, err
	}
	r.ExpiresAt = time.Unix(expires, 0)
	// Every claim writes the lease expiry; a PENDING record without one
	// would hold its key forever once its owner died.
	if _, err := GetN(m, AttrLease, r.Status == dedup.StatusPending, 0, MaxEpoch); err != nil {
		return r, err
	}
	if v, ok := m[AttrResponse]; ok {
		b, ok := v.(*types.AttributeValueMemberB)
		if !ok {
			return r, fmt.Errorf("dynamostore: attribute %s is %T, want binary", AttrResponse, v)
		}
		r.Response = b.Value
	}
	if r.LastError, err = GetS(m, AttrError, false); err != nil {
		return r, err
	}
	takeovers, err := GetN(m, AttrTakeovers, false, 0, 1<<31-1)
	if err != nil {
		return r, err
	}
	r.Takeovers = int(takeovers)
	return r, nil
}

// GetS reads the string attribute name of m: "" when it is absent and not
// required.
func GetS(m map[string]types.AttributeValue, name string, required bool) (string, error) {
	v, ok := m[name]
	if !ok {
		if required {
			return "", fmt.Errorf("dynamostore: attribute %s missing", name)
		}
		return "", nil
	}
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok || s == nil {
		return "", fmt.Errorf("dynamostore: attribute %s is %T, want string", name, v)
	}
	return s.Value, nil
}

// GetN reads the number attribute name of m, which must be within [lo, hi]:
// 0 when it is absent and not required.
func GetN(m map[string]types.AttributeValue, name string, required bool, lo, hi int64) (int64, error) {
	v, ok := m[name]
	if !ok {
		if required {
			return 0, fmt.Errorf("dynamostore: attribute %s missing", name)
		}
		return 0, nil
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok || n == nil {
		return 0, fmt.Errorf("dynamostore: attribute %s is %T, want number", name, v)
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("dynamostore: attribute %s: %w", name, err)
	}
	if i < lo || i > hi {
		return 0, fmt.Errorf("dynamostore: attribute %s = %d out of range [%d, %d]", name, i, lo, hi)
	}
	return i, nil
}

// Unshard is the tenant (or namespace) of a two-part layout's partition
// key pk, without the "#<n>" of TenantShards: a stored tenant holds no '#'
// (dedup.EscapeTenant escapes it; a namespace ends at the key's first '#';
// a hashed one is hex), so a '#' in pk starts the shard.
func Unshard(pk string) string {
	tenant, _, _ := strings.Cut(pk, "#")
	return tenant
}

// Archived reports whether item is a record a claim completed from a
// tombstone.
func Archived(item map[string]types.AttributeValue) bool {
	b, ok := item[AttrArchived].(*types.AttributeValueMemberBOOL)
	return ok && b.Value
}

// CheckSchema checks that a table's key schema is the layout's: pk alone,
// or pk and sk with tenant.
func CheckSchema(t *types.TableDescription, tenant bool) error {
	want := map[string]types.KeyType{AttrPK: types.KeyTypeHash}
	if tenant {
		want[AttrSK] = types.KeyTypeRange
	}
	if t == nil || len(t.KeySchema) != len(want) {
		return fmt.Errorf("key schema does not match the layout (tenant=%v)", tenant)
	}
	for _, k := range t.KeySchema {
		if kt, ok := want[aws.ToString(k.AttributeName)]; !ok || kt != k.KeyType {
			return fmt.Errorf("key schema does not match the layout (tenant=%v)", tenant)
		}
	}
	return nil
}
