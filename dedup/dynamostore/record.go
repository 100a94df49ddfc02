package dynamostore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
)

// Attribute names of a record.
const (
	attrPK       = "pk"
	attrSK       = "sk"
	attrStatus   = "status"
	attrVersion  = "version"
	attrOwner    = "owner"
	attrPayload  = "payload_hash"
	attrAttempts = "attempts"
	attrCreated  = "created_at"
	attrExpires  = "expires_at"
	attrLease    = "lease_expires_at"
	attrResponse = "response"
	attrError    = "error"
	// attrTakeovers counts the takeovers of an abandoned lease; absent is
	// none (a new record does not write it).
	attrTakeovers = "takeovers"
)

// Limits of DynamoDB.
const (
	maxItemSize      = 400 * 1024
	maxTransactItems = 100
	maxPartitionKey  = 2048
	maxSortKey       = 1024
	// maxEpoch is the end of year 9999; later times are not plausible.
	maxEpoch = 253402300799
)

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// ceilUnix rounds an expiry up: a record never expires before asked.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// floorUnix rounds a "now" down: nothing is seen as expired early.
func floorUnix(t time.Time) int64 { return t.Unix() }

// decodeRecord turns a stored item into a Record. It is total: any missing
// or mistyped attribute is a *CorruptRecordError, never a panic.
func decodeRecord(m map[string]types.AttributeValue) (dedup.Record, error) {
	r, err := decodeItem(m)
	if err != nil {
		e := &CorruptRecordError{Err: err}
		if pk, _ := m[attrPK].(*types.AttributeValueMemberS); pk != nil {
			k := pk.Value
			if sk, _ := m[attrSK].(*types.AttributeValueMemberS); sk != nil {
				k = unshard(k) + "#" + sk.Value
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
	pk, err := getS(m, attrPK, true)
	if err != nil {
		return r, err
	}
	if pk == "" {
		return r, errors.New("dynamostore: empty pk")
	}
	r.Key = pk
	if _, ok := m[attrSK]; ok {
		sk, err := getS(m, attrSK, true)
		if err != nil {
			return r, err
		}
		// The key the consumer claimed, whose hash its logs carry: a
		// TenantShards partition key's shard is not part of it.
		r.Key = unshard(pk) + "#" + sk
	}
	status, err := getS(m, attrStatus, true)
	if err != nil {
		return r, err
	}
	switch s := dedup.Status(status); s {
	case dedup.StatusPending, dedup.StatusCompleted, dedup.StatusFailed, dedup.StatusDeadLetter:
		r.Status = s
	default:
		return r, fmt.Errorf("dynamostore: unknown status %q", status)
	}
	if r.Version, err = getN(m, attrVersion, true, 0, 1<<62); err != nil {
		return r, err
	}
	if r.Owner, err = getS(m, attrOwner, true); err != nil {
		return r, err
	}
	if r.PayloadHash, err = getS(m, attrPayload, true); err != nil {
		return r, err
	}
	attempts, err := getN(m, attrAttempts, true, 0, 1<<31-1)
	if err != nil {
		return r, err
	}
	r.Attempts = int(attempts)
	created, err := getN(m, attrCreated, true, 0, maxEpoch)
	if err != nil {
		return r, err
	}
	r.CreatedAt = time.Unix(created, 0)
	expires, err := getN(m, attrExpires, true, 0, maxEpoch)
	if err != nil {
		return r, err
	}
	r.ExpiresAt = time.Unix(expires, 0)
	// Every claim writes the lease expiry; a PENDING record without one
	// would hold its key forever once its owner died.
	if _, err := getN(m, attrLease, r.Status == dedup.StatusPending, 0, maxEpoch); err != nil {
		return r, err
	}
	if v, ok := m[attrResponse]; ok {
		b, ok := v.(*types.AttributeValueMemberB)
		if !ok {
			return r, fmt.Errorf("dynamostore: attribute %s is %T, want binary", attrResponse, v)
		}
		r.Response = b.Value
	}
	if r.LastError, err = getS(m, attrError, false); err != nil {
		return r, err
	}
	takeovers, err := getN(m, attrTakeovers, false, 0, 1<<31-1)
	if err != nil {
		return r, err
	}
	r.Takeovers = int(takeovers)
	return r, nil
}

func getS(m map[string]types.AttributeValue, name string, required bool) (string, error) {
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

func getN(m map[string]types.AttributeValue, name string, required bool, lo, hi int64) (int64, error) {
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

// itemSize estimates an item's stored size by DynamoDB's rules: for each
// attribute, the UTF-8 length of its name plus the size of its value.
func itemSize(m map[string]types.AttributeValue) int {
	n := 0
	for k, v := range m {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberSize(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		return setSize(v.Value, func(s string) int { return len(s) })
	case *types.AttributeValueMemberNS:
		return setSize(v.Value, numberSize)
	case *types.AttributeValueMemberBS:
		return setSize(v.Value, func(b []byte) int { return len(b) })
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += 1 + len(k) + valueSize(e)
		}
		return n
	}
	return 0
}

// setSize is a set's size: its members' sizes, with no overhead.
func setSize[T any](members []T, size func(T) int) int {
	n := 0
	for _, m := range members {
		n += size(m)
	}
	return n
}

// numberSize: one byte per two significant digits, plus one.
func numberSize(s string) int {
	s = strings.TrimLeft(s, "+-")
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		s = s[:i]
	}
	s = strings.Replace(s, ".", "", 1)
	s = strings.Trim(s, "0")
	return (len(s)+1)/2 + 1
}
