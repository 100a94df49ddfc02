package pgstore_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/cache"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/dedup/storetest"
)

func TestConformance(t *testing.T) {
	p := pool(t)
	table := recordsTable(t, p)
	storetest.Run(t, func(t *testing.T) dedup.Store {
		s := newStore(t, p, table, pgstore.MaxResponseSize(testMaxResponse))
		if err := s.Check(testCtx(t)); err != nil {
			t.Fatalf("Check: %v", err)
		}
		return s
	}, storetest.Options{Corrupt: corruptRow(p, table), MaxResponseSize: testMaxResponse, RejectingWrite: rejecting,
		NilWrites: []dedup.Write{(*pgstore.Exec)(nil), pgstore.Func(nil)},
		Inserts:   inserts(t, p, table),
		MissingOutbox: func(t *testing.T) (dedup.Store, string) {
			// A records table whose outbox table was dropped.
			table := recordsTable(t, p)
			ob := pgstore.OutboxTable(table)
			if _, err := p.Exec(testCtx(t), "DROP TABLE "+ob); err != nil {
				t.Fatal(err)
			}
			return newStore(t, p, table), ob
		},
		Peer: func(t *testing.T, _ dedup.Store) dedup.Store {
			return newStore(t, p, table, pgstore.MaxResponseSize(testMaxResponse))
		}})
}

// corruptRow makes the row of l's owner in table corrupt in the way c.
func corruptRow(p *pgxpool.Pool, table string) func(*testing.T, dedup.Store, dedup.Lease, storetest.Corruption) {
	return func(t *testing.T, _ dedup.Store, l dedup.Lease, c storetest.Corruption) {
		set := map[storetest.Corruption]string{storetest.CorruptStatus: "status = 'BOGUS'",
			storetest.CorruptAttempts: "attempts = -1", storetest.CorruptVersion: "version = -1"}[c]
		if set == "" {
			t.Fatalf("no way to plant %v", c)
		}
		tag, err := p.Exec(testCtx(t), "UPDATE "+table+" SET "+set+" WHERE owner = $1", l.Owner)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("planting %v: %v, %v", c, tag, err)
		}
	}
}

// testMaxResponse is the conformance run's response limit, other than the
// default (which the run behind the cache keeps).
const testMaxResponse = 100 << 10

// The suite again through the COMPLETED cache the consumer puts in
// front of every store.
func TestConformanceBehindCache(t *testing.T) {
	p := pool(t)
	table := recordsTable(t, p)
	storetest.Run(t, func(t *testing.T) dedup.Store { return cache.Wrap(newStore(t, p, table), 100, 0) },
		storetest.Options{RaceGoroutines: 16, RaceRounds: 20, Corrupt: corruptRow(p, table)})
}

// Keys are opaque: any bytes, any length. Keys that differ only past the
// inline limit, or by a byte invalid in UTF-8, or by a NUL, are distinct
// records, and each reads back as itself.
func TestKeysAnyBytesAnyLength(t *testing.T) {
	p := pool(t)
	s := newStore(t, p, recordsTable(t, p))
	ctx := testCtx(t)
	long := strings.Repeat("k", 5000)
	keys := []string{"a", "a\x00", "a\x00b", "\xff\xfe", strings.Repeat("x", 1024), strings.Repeat("x", 1025),
		long + "1", long + "2", "\x01" + strings.Repeat("y", 32)}
	now := time.Now()
	for i, k := range keys {
		c, err := s.Claim(ctx, dedup.ClaimRequest{Key: k, Owner: "o", PayloadHash: "h", Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if !c.Acquired {
			t.Fatalf("key %d (%d bytes) collided with an earlier key: %+v", i, len(k), c.Existing)
		}
		r, err := s.Get(ctx, k)
		if err != nil || r.Key != k || r.Version != c.Lease.Version {
			t.Fatalf("key %d: Get %+v, %v", i, r, err)
		}
	}
	if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: "", Owner: "o", Now: now, LeaseUntil: now}); !errors.Is(err, dedup.ErrEmptyKey) {
		t.Fatalf("empty key: %v, want ErrEmptyKey", err)
	}
}

// Expired rows are deleted in bounded batches, oldest first, and only
// once past the grace: a live record and one just expired stay.
func TestDeleteExpired(t *testing.T) {
	p := pool(t)
	s := newStore(t, p, recordsTable(t, p))
	ctx := testCtx(t)
	now := time.Now()
	for i := range 5 {
		k := "old-" + string(rune('a'+i))
		if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: k, Owner: "o", Now: now.Add(-time.Hour), LeaseUntil: now.Add(-30 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: "live", Owner: "o", Now: now, LeaseUntil: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	n, err := s.DeleteExpired(ctx, now.Add(-10*time.Minute), 3)
	if err != nil || n != 3 {
		t.Fatalf("first batch: %d, %v; want 3", n, err)
	}
	n, err = s.DeleteExpired(ctx, now.Add(-10*time.Minute), 3)
	if err != nil || n != 2 {
		t.Fatalf("second batch: %d, %v; want 2", n, err)
	}
	if _, err := s.Get(ctx, "live"); err != nil {
		t.Fatalf("live record: %v", err)
	}
	if _, err := s.Get(ctx, "old-a"); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("expired record: %v, want ErrNotFound", err)
	}
}

// Cleanup, run in a goroutine the caller owns, deletes what is expired
// past its grace in batches, sweeps again, and returns ctx's error when
// cancelled.
func TestCleanupRunsUntilCancelled(t *testing.T) {
	p := pool(t)
	s := newStore(t, p, recordsTable(t, p))
	ctx := testCtx(t)
	now := time.Now()
	for i := range 5 {
		if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: "old-" + strconv.Itoa(i), Owner: "o", Now: now.Add(-time.Hour), LeaseUntil: now.Add(-time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: "live", Owner: "o", Now: now, LeaseUntil: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- s.Cleanup(cctx, pgstore.CleanupOptions{Every: 10 * time.Millisecond, Batch: 2, Grace: time.Second})
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := p.QueryRow(ctx, "SELECT count(*) FROM "+s.Table()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows left; want the live one alone", n)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Cleanup returned %v, want context.Canceled", err)
	}
	if _, err := s.Get(ctx, "live"); err != nil {
		t.Fatalf("the live record: %v", err)
	}
}

// countingDB counts the statements a Store sends (each a round trip).
type countingDB struct {
	pgstore.DB
	n int
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.n++
	return c.DB.Exec(ctx, sql, args...)
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n++
	return c.DB.QueryRow(ctx, sql, args...)
}

// A claim of a new key is one statement; a key that has a record costs a
// second, which a takeover reads the whole record it replaced with and a
// lost claim the record that won.
func TestClaimStatements(t *testing.T) {
	p := pool(t)
	db := &countingDB{DB: p}
	s := newStore(t, db, recordsTable(t, p))
	ctx := testCtx(t)
	// Check finds the table's schema, once, before the first claim.
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Second)
	claim := func(owner string, now time.Time, wantStatements int) dedup.Claim {
		t.Helper()
		db.n = 0
		c, err := s.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: owner, PayloadHash: "h-" + owner, Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil {
			t.Fatalf("claim by %s: %v", owner, err)
		}
		if db.n != wantStatements {
			t.Fatalf("claim by %s sent %d statements, want %d", owner, db.n, wantStatements)
		}
		return c
	}
	a := claim("a", t0, 1)
	if !a.Acquired || a.Previous != nil || a.Attempt != 1 {
		t.Fatalf("fresh claim: %+v", a)
	}
	if err := s.Fail(ctx, dedup.FailRequest{Lease: a.Lease, Reason: "boom", Now: t0, RetryAt: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	lost := claim("b", t0, 2)
	if lost.Acquired || lost.Existing.Status != dedup.StatusFailed || lost.Existing.Owner != "a" || lost.Existing.LastError != "boom" {
		t.Fatalf("claim before the retry time: %+v, want FAILED by a", lost)
	}
	c := claim("c", t0.Add(2*time.Second), 2)
	want := dedup.Record{Key: "k", Status: dedup.StatusFailed, Version: a.Lease.Version + 1, Owner: "a", PayloadHash: "h-a",
		Attempts: 1, LastError: "boom", CreatedAt: t0, ExpiresAt: t0.Add(time.Second)}
	if !c.Acquired || c.Attempt != 2 || c.Previous == nil {
		t.Fatalf("takeover of FAILED: %+v", c)
	}
	got := *c.Previous
	if !got.CreatedAt.Equal(want.CreatedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("takeover saw times %v, %v; want %v, %v", got.CreatedAt, got.ExpiresAt, want.CreatedAt, want.ExpiresAt)
	}
	got.CreatedAt, got.ExpiresAt = want.CreatedAt, want.ExpiresAt
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("takeover saw previous\n %+v\nwant\n %+v", got, want)
	}
}

// rejecting is a business write whose own condition fails.
func rejecting() dedup.Write {
	return pgstore.Func(func(context.Context, pgx.Tx) error { return pgstore.ErrRejected })
}
