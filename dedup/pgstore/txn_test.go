package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
)

// shop is a business schema beside the records: orders (unique ids) and
// stock (a count that must not go below 0).
type shop struct {
	p             *pgxpool.Pool
	orders, stock string
	store         *pgstore.Store
	now           time.Time
}

func newShop(t *testing.T) *shop {
	p := pool(t)
	sh := &shop{p: p, orders: uniqueName("orders"), stock: uniqueName("stock"), store: newStore(t, p, recordsTable(t, p)),
		now: time.Now()}
	ctx := testCtx(t)
	for _, stmt := range []string{
		"CREATE TABLE " + sh.orders + " (id text PRIMARY KEY, sku text NOT NULL)",
		"CREATE TABLE " + sh.stock + " (sku text PRIMARY KEY, n integer NOT NULL)",
		"INSERT INTO " + sh.stock + " VALUES ('apple', 1), ('pear', 0)",
	} {
		if _, err := p.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+sh.orders+", "+sh.stock) })
	return sh
}

// order is the business effect of one message: an order row, and one
// unit of stock taken only if there is one.
func (sh *shop) order(id, sku string) []dedup.Write {
	return []dedup.Write{
		pgstore.Exec{SQL: "INSERT INTO " + sh.orders + " (id, sku) VALUES ($1, $2)", Args: []any{id, sku}},
		pgstore.Exec{SQL: "UPDATE " + sh.stock + " SET n = n - 1 WHERE sku = $1 AND n > 0", Args: []any{sku}, MustAffect: true},
	}
}

func (sh *shop) hasOrder(t *testing.T, id string) bool {
	t.Helper()
	var n int
	if err := sh.p.QueryRow(testCtx(t), "SELECT count(*) FROM "+sh.orders+" WHERE id = $1", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func (sh *shop) claim(t *testing.T, key, owner string, now, until time.Time) dedup.Lease {
	t.Helper()
	c, err := sh.store.Claim(testCtx(t), dedup.ClaimRequest{Key: key, Owner: owner, Now: now, LeaseUntil: until})
	if err != nil || !c.Acquired {
		t.Fatalf("claim %s by %s: %+v, %v", key, owner, c, err)
	}
	return c.Lease
}

func (sh *shop) status(t *testing.T, key string) dedup.Status {
	t.Helper()
	r, err := sh.store.Get(testCtx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

func TestWritesCommitWithCompleted(t *testing.T) {
	sh := newShop(t)
	l := sh.claim(t, "k1", "a", sh.now, sh.now.Add(time.Minute))
	err := sh.store.Complete(testCtx(t), dedup.CompleteRequest{Lease: l, Response: []byte("ok"), Now: sh.now, ExpiresAt: sh.now.Add(time.Hour), Writes: sh.order("o1", "apple")})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if !sh.hasOrder(t, "o1") || sh.status(t, "k1") != dedup.StatusCompleted {
		t.Fatal("order or COMPLETED missing after the commit")
	}
}

// The connection dies after the business write ran and before the
// commit: neither the write nor COMPLETED is there, the lease is still
// held, and the holder's retry commits both.
func TestKillBetweenWriteAndCommit(t *testing.T) {
	sh := newShop(t)
	ctx := testCtx(t)
	l := sh.claim(t, "k1", "a", sh.now, sh.now.Add(time.Minute))
	kill := pgstore.Func(func(ctx context.Context, tx pgx.Tx) error {
		var pid int
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return err
		}
		_, err := sh.p.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
		return err
	})
	err := sh.store.Complete(ctx, dedup.CompleteRequest{Lease: l, Response: []byte("ok"), Now: sh.now, ExpiresAt: sh.now.Add(time.Hour),
		Writes: append(sh.order("o1", "apple"), kill)})
	if err == nil {
		t.Fatal("Complete over a killed connection succeeded")
	}
	if errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("Complete over a killed connection: %v, want a connection error", err)
	}
	if sh.hasOrder(t, "o1") || sh.status(t, "k1") != dedup.StatusPending {
		t.Fatal("a half of the killed commit is there")
	}
	if err := sh.store.Complete(ctx, dedup.CompleteRequest{Lease: l, Response: []byte("ok"), Now: sh.now, ExpiresAt: sh.now.Add(time.Hour), Writes: sh.order("o1", "apple")}); err != nil {
		t.Fatalf("retried Complete: %v", err)
	}
	if !sh.hasOrder(t, "o1") || sh.status(t, "k1") != dedup.StatusCompleted {
		t.Fatal("the retried commit is missing a half")
	}
}

// A holder whose lease was taken over is fenced: its writes never commit,
// and the new holder's do.
func TestLateOwnerWritesFenced(t *testing.T) {
	sh := newShop(t)
	ctx := testCtx(t)
	a := sh.claim(t, "k1", "a", sh.now, sh.now.Add(10*time.Second))
	b := sh.claim(t, "k1", "b", sh.now.Add(11*time.Second), sh.now.Add(time.Minute))
	err := sh.store.Complete(ctx, dedup.CompleteRequest{Lease: a, Now: sh.now, ExpiresAt: sh.now.Add(time.Hour), Writes: sh.order("from-a", "apple")})
	if !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("late owner's Complete: %v, want ErrLeaseLost", err)
	}
	if sh.hasOrder(t, "from-a") {
		t.Fatal("the fenced owner's write committed")
	}
	if err := sh.store.Complete(ctx, dedup.CompleteRequest{Lease: b, Now: sh.now, ExpiresAt: sh.now.Add(time.Hour), Writes: sh.order("from-b", "apple")}); err != nil {
		t.Fatal(err)
	}
	if !sh.hasOrder(t, "from-b") {
		t.Fatal("the holder's write is missing")
	}
}

// A write whose condition fails (no stock), or that breaks a constraint
// (an order id used twice), cancels the commit: the earlier write of the
// same Complete is undone, the record stays PENDING and the lease held.
func TestConflictRejected(t *testing.T) {
	sh := newShop(t)
	ctx := testCtx(t)
	l := sh.claim(t, "k1", "a", sh.now, sh.now.Add(time.Minute))
	err := sh.store.Complete(ctx, dedup.CompleteRequest{Lease: l, Now: sh.now, ExpiresAt: sh.now.Add(time.Hour), Writes: sh.order("o1", "pear")})
	var be *dedup.BusinessConditionError
	if !errors.As(err, &be) || be.Index != 1 {
		t.Fatalf("Complete without stock: %v, want a BusinessConditionError on write 1", err)
	}
	if sh.hasOrder(t, "o1") || sh.status(t, "k1") != dedup.StatusPending {
		t.Fatal("a rejected commit left a trace")
	}
	if err := sh.store.Complete(ctx, dedup.CompleteRequest{Lease: l, Now: sh.now, ExpiresAt: sh.now.Add(time.Hour), Writes: sh.order("o1", "apple")}); err != nil {
		t.Fatalf("lease not held after a rejection: %v", err)
	}
	l2 := sh.claim(t, "k2", "a", sh.now, sh.now.Add(time.Minute))
	err = sh.store.Complete(ctx, dedup.CompleteRequest{Lease: l2, Now: sh.now, ExpiresAt: sh.now.Add(time.Hour), Writes: sh.order("o1", "apple")[:1]})
	if !errors.As(err, &be) || be.Index != 0 || be.Reason != "IntegrityConstraintViolation" {
		t.Fatalf("a duplicate order id: %v, want a BusinessConditionError on write 0", err)
	}
	if sh.status(t, "k2") != dedup.StatusPending {
		t.Fatal("COMPLETED committed without its write")
	}
}

// ClaimComplete with writes: one transaction. A duplicate runs no write;
// a rejected write leaves the key absent.
func TestClaimCompleteWrites(t *testing.T) {
	sh := newShop(t)
	ctx := testCtx(t)
	req := dedup.ClaimCompleteRequest{Key: "k1", Owner: "a", Response: []byte("r"), Now: sh.now, ExpiresAt: sh.now.Add(time.Hour), Writes: sh.order("o1", "apple")}
	c, err := sh.store.ClaimComplete(ctx, req)
	if err != nil || !c.Acquired {
		t.Fatalf("ClaimComplete: %+v, %v", c, err)
	}
	if !sh.hasOrder(t, "o1") || sh.status(t, "k1") != dedup.StatusCompleted {
		t.Fatal("a half of ClaimComplete is missing")
	}
	ran := false
	req.Owner, req.Writes = "b", []dedup.Write{pgstore.Func(func(context.Context, pgx.Tx) error { ran = true; return nil })}
	if c, err = sh.store.ClaimComplete(ctx, req); err != nil || c.Acquired || c.Existing.Owner != "a" {
		t.Fatalf("duplicate ClaimComplete: %+v, %v", c, err)
	}
	if ran {
		t.Fatal("a duplicate's write ran")
	}
	req = dedup.ClaimCompleteRequest{Key: "k2", Owner: "a", Now: sh.now, ExpiresAt: sh.now.Add(time.Hour), Writes: sh.order("o2", "pear")}
	var be *dedup.BusinessConditionError
	if _, err = sh.store.ClaimComplete(ctx, req); !errors.As(err, &be) {
		t.Fatalf("ClaimComplete without stock: %v, want a BusinessConditionError", err)
	}
	if _, err := sh.store.Get(ctx, "k2"); !errors.Is(err, dedup.ErrNotFound) || sh.hasOrder(t, "o2") {
		t.Fatalf("a rejected ClaimComplete left a trace: %v", err)
	}
}
