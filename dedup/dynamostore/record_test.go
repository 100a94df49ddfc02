package dynamostore

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
)

func validItem() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrPK:       str("ns#k"),
		attrStatus:   str("COMPLETED"),
		attrVersion:  num(3),
		attrOwner:    str("o"),
		attrPayload:  str("h"),
		attrAttempts: num(2),
		attrCreated:  num(1700000000),
		attrExpires:  num(1700003600),
		attrResponse: &types.AttributeValueMemberB{Value: []byte("r")},
		attrError:    str("e"),
	}
}

func TestDecodeRecord(t *testing.T) {
	r, err := decodeRecord(validItem())
	if err != nil {
		t.Fatal(err)
	}
	want := dedup.Record{Key: "ns#k", Status: dedup.StatusCompleted, Version: 3, Owner: "o", PayloadHash: "h",
		Response: []byte("r"), Attempts: 2, LastError: "e", CreatedAt: time.Unix(1700000000, 0), ExpiresAt: time.Unix(1700003600, 0)}
	if r.Key != want.Key || r.Status != want.Status || r.Version != want.Version || r.Owner != want.Owner ||
		r.PayloadHash != want.PayloadHash || string(r.Response) != "r" || r.Attempts != 2 || r.LastError != "e" ||
		!r.CreatedAt.Equal(want.CreatedAt) || !r.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("decoded %+v", r)
	}
	tenant := validItem()
	tenant[attrPK], tenant[attrSK] = str("ns"), str("a#b")
	if r, err := decodeRecord(tenant); err != nil || r.Key != "ns#a#b" {
		t.Fatalf("tenant layout: %q %v", r.Key, err)
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	required := []string{attrPK, attrStatus, attrVersion, attrOwner, attrPayload, attrAttempts, attrCreated, attrExpires}
	for _, name := range required {
		m := validItem()
		delete(m, name)
		if _, err := decodeRecord(m); err == nil {
			t.Errorf("missing %s accepted", name)
		}
	}
	bad := map[string]types.AttributeValue{
		attrPK:       num(1),
		attrSK:       num(1),
		attrStatus:   str("DONE"),
		attrVersion:  str("1"),
		attrAttempts: &types.AttributeValueMemberN{Value: "1.5"},
		attrCreated:  &types.AttributeValueMemberN{Value: "-1"},
		attrExpires:  &types.AttributeValueMemberN{Value: "99999999999999999999"},
		attrLease:    str("x"),
		attrResponse: str("not binary"),
		attrError:    &types.AttributeValueMemberBOOL{Value: true},
		attrOwner:    (*types.AttributeValueMemberS)(nil),
	}
	for name, v := range bad {
		m := validItem()
		m[name] = v
		if _, err := decodeRecord(m); err == nil {
			t.Errorf("%s = %#v accepted", name, v)
		}
	}
	for _, m := range []map[string]types.AttributeValue{nil, {}, {attrPK: str("")}, {attrPK: nil}} {
		if _, err := decodeRecord(m); err == nil {
			t.Errorf("%v accepted", m)
		}
	}
}

func TestItemSize(t *testing.T) {
	for _, tc := range []struct {
		n    string
		want int
	}{{"0", 1}, {"1", 2}, {"12", 2}, {"123", 3}, {"1000", 2}, {"-12.50", 3}, {"0.001", 2}, {"1700000000", 2}, {"1234567890", 6}} {
		if got := numberSize(tc.n); got != tc.want {
			t.Errorf("numberSize(%s) = %d, want %d", tc.n, got, tc.want)
		}
	}
	m := map[string]types.AttributeValue{
		"s": str("abc"),                                                                          // 1 + 3
		"b": &types.AttributeValueMemberB{Value: []byte{1, 2}},                                   // 1 + 2
		"t": &types.AttributeValueMemberBOOL{Value: true},                                        // 1 + 1
		"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{str("x")}},               // 1 + 3 + 1 + 1
		"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": str("v")}}, // 1 + 3 + 1 + 1 + 1
	}
	if got := itemSize(m); got != 4+3+2+6+7 {
		t.Fatalf("itemSize = %d", got)
	}
}

func TestRounding(t *testing.T) {
	base := time.Unix(1000, 0)
	if ceilUnix(base) != 1000 || ceilUnix(base.Add(time.Nanosecond)) != 1001 || floorUnix(base.Add(999*time.Millisecond)) != 1000 {
		t.Fatal("rounding")
	}
}

func reasons(codes ...string) *types.TransactionCanceledException {
	tce := &types.TransactionCanceledException{}
	for _, c := range codes {
		tce.CancellationReasons = append(tce.CancellationReasons, types.CancellationReason{Code: aws.String(c)})
	}
	return tce
}

type cancellationFunc func(reason string)

func (f cancellationFunc) OnDynamoCancellation(_ context.Context, _, reason string) { f(reason) }

func TestReadCancellation(t *testing.T) {
	var seen []string
	h := hooks{cancellation: []HookDynamoCancellation{cancellationFunc(func(r string) { seen = append(seen, r) })}}
	for _, tc := range []struct {
		codes    []string
		record   bool
		business int
		class    retry.Class // of the error; -1 for none
	}{
		{[]string{"ConditionalCheckFailed", "None"}, true, -1, -1},
		{[]string{"ConditionalCheckFailed", "ConditionalCheckFailed"}, true, 0, -1},
		{[]string{"None", "None", "ConditionalCheckFailed"}, false, 1, -1},
		{[]string{"None", "TransactionConflict"}, false, -1, retry.Transient},
		{[]string{"None", "ConditionalCheckFailed", "TransactionConflict"}, false, 0, retry.Transient},
		{[]string{"ThrottlingError", "TransactionConflict"}, false, -1, retry.Throttled},
		{[]string{"None", "ProvisionedThroughputExceeded"}, false, -1, retry.Throttled},
		{[]string{"None", "ItemCollectionSizeLimitExceeded"}, false, -1, retry.Permanent},
		{[]string{"ValidationError", "TransactionConflict"}, false, -1, retry.Permanent},
		{[]string{"None", "None"}, false, -1, retry.Transient},
	} {
		c, err := readCancellation(t.Context(), "Complete", reasons(tc.codes...), &h, nil)
		if c.recordFailed != tc.record || (err == nil && c.business != tc.business) {
			t.Errorf("%v: record %v business %d", tc.codes, c.recordFailed, c.business)
		}
		switch {
		case tc.class < 0 && err != nil:
			t.Errorf("%v: unexpected error %v", tc.codes, err)
		case tc.class >= 0 && (err == nil || retry.Classify(err) != tc.class):
			t.Errorf("%v: error %v, want class %v", tc.codes, err, tc.class)
		}
		if err != nil {
			if at := testenv.EmptySegment(err.Error()); at != "" {
				t.Errorf("%v: %q has an empty segment at %s", tc.codes, err, at)
			}
		}
	}
	if len(seen) == 0 || seen[0] != "ConditionalCheckFailed" {
		t.Fatalf("hooks saw %v", seen)
	}
}
