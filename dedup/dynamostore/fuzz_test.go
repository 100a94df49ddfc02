package dynamostore

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
)

// fuzzValue is a fuzzed attribute: kind picks its type (or absence), so the
// decoder sees every attribute missing, mistyped, nil or well-formed.
func fuzzValue(kind uint8, s string, b []byte) (types.AttributeValue, bool) {
	switch kind % 6 {
	case 0:
		return nil, false
	case 1:
		return &types.AttributeValueMemberS{Value: s}, true
	case 2:
		return &types.AttributeValueMemberN{Value: s}, true
	case 3:
		return &types.AttributeValueMemberB{Value: b}, true
	case 4:
		return &types.AttributeValueMemberBOOL{Value: len(s)%2 == 0}, true
	default:
		return nil, true // present but nil
	}
}

// encodeRecord writes r back as this package stores it (the lease expiry
// of a PENDING record is its ExpiresAt).
func encodeRecord(r dedup.Record, tenant bool) map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{
		attrStatus: str(string(r.Status)), attrVersion: num(r.Version), attrOwner: str(r.Owner),
		attrPayload: str(r.PayloadHash), attrAttempts: num(int64(r.Attempts)),
		attrCreated: num(r.CreatedAt.Unix()), attrExpires: num(r.ExpiresAt.Unix()),
	}
	m[attrPK] = str(r.Key)
	if pk, sk, ok := strings.Cut(r.Key, "#"); tenant && ok {
		m[attrPK], m[attrSK] = str(pk), str(sk)
	}
	if r.Status == dedup.StatusPending {
		m[attrLease] = num(r.ExpiresAt.Unix())
	}
	if r.Response != nil {
		m[attrResponse] = &types.AttributeValueMemberB{Value: r.Response}
	}
	if r.LastError != "" {
		m[attrError] = str(r.LastError)
	}
	return m
}

// Items built from fuzzed attributes: decodeRecord never panics, and
// either refuses the item with a *CorruptRecordError or returns a record
// that encodes back to an item decoding to the same record.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(uint8(1), "ns#k", uint8(0), "", uint8(1), "COMPLETED", uint8(2), "3", uint8(1), "o", uint8(1), "h",
		uint8(2), "2", uint8(2), "1700000000", uint8(2), "1700003600", uint8(0), "", uint8(3), []byte("r"), uint8(1), "e")
	f.Add(uint8(1), "ns", uint8(1), "a#b", uint8(1), "PENDING", uint8(2), "1", uint8(1), "o", uint8(1), "h",
		uint8(2), "1", uint8(2), "1700000000", uint8(2), "1700000060", uint8(2), "1700000060", uint8(0), []byte(nil), uint8(0), "")
	f.Add(uint8(1), "ns#k", uint8(0), "", uint8(1), "PENDING", uint8(2), "1", uint8(1), "o", uint8(1), "h",
		uint8(2), "1", uint8(2), "1700000000", uint8(2), "1700000060", uint8(0), "", uint8(0), []byte(nil), uint8(0), "")
	f.Add(uint8(2), "1", uint8(5), "", uint8(1), "DONE", uint8(1), "1", uint8(5), "", uint8(4), "",
		uint8(2), "1.5", uint8(2), "-1", uint8(2), "99999999999999999999", uint8(1), "x", uint8(1), []byte("r"), uint8(4), "")
	f.Fuzz(func(t *testing.T, kPK uint8, pk string, kSK uint8, sk string, kStatus uint8, status string,
		kVersion uint8, version string, kOwner uint8, owner string, kPayload uint8, payload string,
		kAttempts uint8, attempts string, kCreated uint8, created string, kExpires uint8, expires string,
		kLease uint8, lease string, kResponse uint8, response []byte, kError uint8, errText string) {
		m := map[string]types.AttributeValue{}
		for _, a := range []struct {
			name string
			kind uint8
			s    string
		}{{attrPK, kPK, pk}, {attrSK, kSK, sk}, {attrStatus, kStatus, status}, {attrVersion, kVersion, version},
			{attrOwner, kOwner, owner}, {attrPayload, kPayload, payload}, {attrAttempts, kAttempts, attempts},
			{attrCreated, kCreated, created}, {attrExpires, kExpires, expires}, {attrLease, kLease, lease},
			{attrResponse, kResponse, string(response)}, {attrError, kError, errText}} {
			if v, ok := fuzzValue(a.kind, a.s, []byte(a.s)); ok {
				m[a.name] = v
			}
		}
		r, err := decodeRecord(m)
		if err != nil {
			var ce *CorruptRecordError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("error %v (%T) is not a *CorruptRecordError", err, err)
			}
			return
		}
		if r.Key == "" || r.Status != dedup.StatusPending && r.Status != dedup.StatusCompleted && r.Status != dedup.StatusFailed {
			t.Fatalf("accepted an item with no key or an unknown status: %+v", r)
		}
		_, tenant := m[attrSK]
		back, err := decodeRecord(encodeRecord(r, tenant))
		if err != nil {
			t.Fatalf("record %+v does not round-trip: %v", r, err)
		}
		if back.Key != r.Key || back.Status != r.Status || back.Version != r.Version || back.Owner != r.Owner ||
			back.PayloadHash != r.PayloadHash || !bytes.Equal(back.Response, r.Response) || back.Attempts != r.Attempts ||
			back.LastError != r.LastError || !back.CreatedAt.Equal(r.CreatedAt) || !back.ExpiresAt.Equal(r.ExpiresAt) {
			t.Fatalf("round trip changed the record:\n %+v\n %+v", r, back)
		}
	})
}
