package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
)

// FindKeyHash finds a record from the key_hash logs carry, counts the
// rows it read and the keys stored as a hash, and stops at its limit.
func TestFindKeyHash(t *testing.T) {
	ctx := testCtx(t)
	p := pool(t)
	s := newStore(t, p, recordsTable(t, p))
	now := time.Now()
	claim := func(key string) {
		t.Helper()
		if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "w", PayloadHash: "h", Now: now, LeaseUntil: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"onceq#a", "onceq#b", "onceq#c", "onceq#" + strings.Repeat("x", 2000)} {
		claim(k)
	}
	res, err := s.FindKeyHash(ctx, dedup.KeyHash("onceq#b"), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 1 || res.Records[0].Key != "onceq#b" || res.Records[0].Status != dedup.StatusPending ||
		res.Scanned != 4 || !res.Exhausted || res.Unmatchable != 1 {
		t.Fatalf("found %+v; want onceq#b PENDING, 4 rows read to the end, 1 unmatchable", res)
	}
	if n, err := s.ExpiredRows(ctx, now.Add(2*time.Hour), 3); err != nil || n != 3 {
		t.Fatalf("ExpiredRows of 4 leases of an hour, 2 h on, limit 3: %d, %v; want 3", n, err)
	}
	if n, err := s.ExpiredRows(ctx, now, 10); err != nil || n != 0 {
		t.Fatalf("ExpiredRows now: %d, %v; want 0", n, err)
	}
	res, err = s.FindKeyHash(ctx, dedup.KeyHash("onceq#absent"), 2)
	if err != nil || len(res.Records) != 0 || res.Scanned != 2 || res.Exhausted {
		t.Fatalf("limit 2: %+v, %v; want 2 rows read, not exhausted", res, err)
	}
	for _, bad := range []string{"xyz", "B66AAE365225", ""} {
		if _, err := s.FindKeyHash(ctx, bad, 10); !errors.Is(err, pgstore.ErrInvalidConfig) {
			t.Errorf("key hash %q: %v, want ErrInvalidConfig", bad, err)
		}
	}
}

// Describe finds a table of CreateTable's layout sound, and names what a
// hand-made table lacks.
func TestDescribe(t *testing.T) {
	ctx := testCtx(t)
	p := pool(t)
	info, err := newStore(t, p, recordsTable(t, p)).Describe(ctx)
	if err != nil || len(info.Problems) != 0 || !info.ExpiryIndex || !strings.HasPrefix(info.Name, "public.") {
		t.Fatalf("CreateTable's table: %+v, %v", info, err)
	}
	name := uniqueName("onceq_test")
	if _, err := p.Exec(ctx, "CREATE TABLE "+name+` (id text, status text, version integer, owner text, payload_hash text,
		response bytea, attempts integer, last_error text, created_at timestamptz, expires_at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+name) })
	info, err = newStore(t, p, name).Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"column id is text, want bytea", "column version is integer, want bigint", "no column takeovers (integer)", "no primary key (or unique index) on id alone"}
	if strings.Join(info.Problems, "; ") != strings.Join(want, "; ") || info.ExpiryIndex {
		t.Fatalf("hand-made table: %+v; want problems %q and no expiry index", info, want)
	}
	if _, err := newStore(t, p, uniqueName("onceq_absent")).Describe(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("absent table: %v", err)
	}
}
