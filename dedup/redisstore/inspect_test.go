package redisstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/redisstore"
)

// FindKeyHash finds a record from the key_hash logs carry, under its own
// prefix only (glob characters in it match themselves), and stops at its
// limit; CheckRecords tells records from what else lives under the prefix.
func TestFindKeyHashAndCheckRecords(t *testing.T) {
	ctx := testCtx(t)
	c := client(t, nil)
	p := prefix() + "*?["
	s := open(t, c, redisstore.Prefix(p))
	other := open(t, c, redisstore.Prefix(p[:len(p)-3]+"x"))
	now := time.Now()
	for _, st := range []*redisstore.Store{s, other} {
		for _, k := range []string{"onceq#a", "onceq#b", "onceq#c"} {
			if _, err := st.Claim(ctx, dedup.ClaimRequest{Key: k, Owner: "w", PayloadHash: "h", Now: now, LeaseUntil: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	res, err := s.FindKeyHash(ctx, dedup.KeyHash("onceq#b"), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 1 || res.Records[0].Key != "" || res.Records[0].Owner != "w" || res.Scanned != 3 || !res.Exhausted {
		t.Fatalf("found %+v; want one record, no key stored, 3 names read to the end", res)
	}
	if res, err := s.FindKeyHash(ctx, dedup.KeyHash("onceq#absent"), 1); err != nil || len(res.Records) != 0 || res.Exhausted {
		t.Fatalf("limit 1: %+v, %v; want none found, not exhausted", res, err)
	}
	if _, err := s.FindKeyHash(ctx, "xyz", 10); !errors.Is(err, redisstore.ErrInvalidConfig) {
		t.Fatalf("bad key hash: %v", err)
	}

	sample, err := s.CheckRecords(ctx, 100)
	if err != nil || sample.Scanned != 3 || sample.Layouts['1'] != 3 || sample.Foreign != 0 {
		t.Fatalf("sample %+v, %v; want 3 records of layout 1", sample, err)
	}
	c.HSet(ctx, p+"{hash}", "f", "v")
	c.Set(ctx, p+"{str}", "9P1:0:", time.Hour)
	t.Cleanup(func() { c.Del(ctx, p+"{hash}", p+"{str}") })
	sample, err = s.CheckRecords(ctx, 100)
	if err != nil || sample.Scanned != 5 || sample.Layouts['1'] != 3 || sample.Foreign != 2 {
		t.Fatalf("sample %+v, %v; want 3 records and 2 foreign keys", sample, err)
	}
}
