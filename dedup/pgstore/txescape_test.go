package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
)

// A business write runs inside the transaction that writes COMPLETED and
// cannot step out of it: an Exec is one statement (PostgreSQL refuses a
// second), and a write that ends the transaction itself (COMMIT,
// ROLLBACK) is caught before anything else runs, with a truthful answer.
// Before, "ROLLBACK; INSERT …" rolled COMPLETED back, committed the insert
// on its own, and Complete reported success: the next worker applied the
// effect again.
func TestWritesStayInTheTransaction(t *testing.T) {
	rollbackThenInsert := func(sh *shop, id string) dedup.Write {
		return pgstore.Exec{SQL: "ROLLBACK; INSERT INTO " + sh.orders + " (id, sku) VALUES ('" + id + "', 'apple')"}
	}
	commitThenInsert := func(sh *shop, id string) dedup.Write {
		return pgstore.Exec{SQL: "COMMIT; INSERT INTO " + sh.orders + " (id, sku) VALUES ('" + id + "', 'apple')"}
	}
	for name, tc := range map[string]struct {
		writes        func(sh *shop, id string) []dedup.Write
		wantCommitted bool // COMPLETED is stored after the refusal
		wantEnded     bool // a *TxEndedError (else the server refused the statement)
	}{
		"rollback and insert in one Exec": {writes: func(sh *shop, id string) []dedup.Write { return []dedup.Write{rollbackThenInsert(sh, id)} }},
		"commit and insert in one Exec, then a duplicate order": {writes: func(sh *shop, id string) []dedup.Write {
			return append([]dedup.Write{commitThenInsert(sh, id)}, sh.order(id, "apple")...)
		}},
		"rollback and insert in one Exec with arguments": {writes: func(sh *shop, id string) []dedup.Write {
			return []dedup.Write{pgstore.Exec{SQL: "ROLLBACK; INSERT INTO " + sh.orders + " (id, sku) VALUES ($1, 'apple')", Args: []any{id}}}
		}},
		"an Exec that rolls back": {wantEnded: true, writes: func(sh *shop, id string) []dedup.Write {
			return append([]dedup.Write{pgstore.Exec{SQL: "ROLLBACK"}}, sh.order(id, "apple")...)
		}},
		"an Exec that commits": {wantEnded: true, wantCommitted: true, writes: func(sh *shop, id string) []dedup.Write {
			return append([]dedup.Write{pgstore.Exec{SQL: "COMMIT"}}, sh.order(id, "apple")...)
		}},
		"a Func that rolls back": {wantEnded: true, writes: func(sh *shop, id string) []dedup.Write {
			return append([]dedup.Write{pgstore.Func(func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Conn().Exec(ctx, "ROLLBACK")
				return err
			})}, sh.order(id, "apple")...)
		}},
		"a Func that commits": {wantEnded: true, wantCommitted: true, writes: func(sh *shop, id string) []dedup.Write {
			return append([]dedup.Write{pgstore.Func(func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Conn().Exec(ctx, "COMMIT")
				return err
			})}, sh.order(id, "apple")...)
		}},
	} {
		t.Run(name, func(t *testing.T) {
			sh := newShop(t)
			ctx := testCtx(t)
			for _, one := range []bool{false, true} {
				key, id := "k-complete", "o-complete"
				var err error
				var lease dedup.Lease
				if one {
					key, id = "k-claim-complete", "o-claim-complete"
					var c dedup.Claim
					c, err = sh.store.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: key, Owner: "a", Response: []byte("r"),
						Now: sh.now, ExpiresAt: sh.now.Add(time.Hour), Writes: tc.writes(sh, id)})
					lease = dedup.Lease{Key: key, Owner: "a", Version: 1}
					if err == nil && !c.Acquired {
						t.Fatalf("ClaimComplete lost: %+v", c)
					}
				} else {
					lease = sh.claim(t, key, "a", sh.now, sh.now.Add(time.Minute))
					err = sh.store.Complete(ctx, dedup.CompleteRequest{Lease: lease, Response: []byte("r"), Now: sh.now,
						ExpiresAt: sh.now.Add(time.Hour), Writes: tc.writes(sh, id)})
				}
				if err == nil {
					t.Fatalf("claim-complete %v: a write that left the transaction: no error", one)
				}
				var be *dedup.BusinessConditionError
				if errors.As(err, &be) {
					t.Fatalf("claim-complete %v: %v: reported as a cancelled commit", one, err)
				}
				var te *pgstore.TxEndedError
				if ended := errors.As(err, &te); ended != tc.wantEnded || !errors.Is(err, pgstore.ErrTxEnded) && ended {
					t.Fatalf("claim-complete %v: %v (%T), want a *TxEndedError: %v", one, err, err, tc.wantEnded)
				} else if ended && (te.Index != 0 || te.Committed != tc.wantCommitted) {
					t.Fatalf("claim-complete %v: %+v, want write 0, committed %v", one, te, tc.wantCommitted)
				}
				r, gerr := sh.store.Get(ctx, key)
				completed := gerr == nil && r.Status == dedup.StatusCompleted
				if completed != tc.wantCommitted {
					t.Fatalf("claim-complete %v: record %+v (%v) after %v; want COMPLETED: %v", one, r, gerr, err, tc.wantCommitted)
				}
				if completed && r.Version != lease.Version+map[bool]int64{false: 1, true: 0}[one] {
					t.Fatalf("claim-complete %v: record %+v", one, r)
				}
				if sh.hasOrder(t, id) {
					t.Fatalf("claim-complete %v: the order committed outside the transaction (%v)", one, err)
				}
			}
		})
	}
}

// A write's SET search_path outlives its transaction on the pooled
// connection: the store's later statements on that connection still reach
// the records table they were given, not a table of that name in the
// schema the write chose.
func TestSearchPathOfAWriteKeepsTheTable(t *testing.T) {
	p := pool(t)
	ctx := testCtx(t)
	table := recordsTable(t, p)
	other := uniqueName("other")
	if _, err := p.Exec(ctx, "CREATE SCHEMA "+other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP SCHEMA "+other+" CASCADE") })
	if err := pgstore.CreateTable(ctx, p, other+"."+table); err != nil {
		t.Fatal(err)
	}
	// One connection, so the next statement surely meets the write's session.
	conn, err := pgx.Connect(ctx, p.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	s := newStore(t, conn, table)
	now := time.Now()
	c, err := s.Claim(ctx, dedup.ClaimRequest{Key: "a", Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !c.Acquired {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	err = s.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Response: []byte("r"), Now: now, ExpiresAt: now.Add(time.Hour),
		Writes: []dedup.Write{pgstore.Exec{SQL: "SET search_path TO " + other}}})
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	c, err = s.Claim(ctx, dedup.ClaimRequest{Key: "b", Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !c.Acquired {
		t.Fatalf("claim after the write: %+v, %v", c, err)
	}
	var inGiven, inOther int
	if err := p.QueryRow(ctx, "SELECT (SELECT count(*) FROM public."+table+"), (SELECT count(*) FROM "+other+"."+table+")").
		Scan(&inGiven, &inOther); err != nil {
		t.Fatal(err)
	}
	if inGiven != 2 || inOther != 0 {
		t.Fatalf("records: %d in the table given, %d in %s's; want 2 and 0", inGiven, inOther, other)
	}
}

// The one-statement rule changes nothing else of an Exec: named arguments,
// no arguments, and a pool set to the simple protocol (which would run a
// string of statements) all work, and there too a second statement is
// refused.
func TestExecOneStatementEveryWay(t *testing.T) {
	sh := newShop(t)
	ctx := testCtx(t)
	cfg := sh.p.Config().ConnConfig.Copy()
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	simple, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = simple.Close(context.Background()) })
	for i, st := range []*pgstore.Store{sh.store, newStore(t, simple, sh.store.Table())} {
		key := "k" + string(rune('a'+i))
		l := sh.claim(t, key, "a", sh.now, sh.now.Add(time.Minute))
		err := st.Complete(ctx, dedup.CompleteRequest{Lease: l, Response: []byte("r"), Now: sh.now, ExpiresAt: sh.now.Add(time.Hour),
			Writes: []dedup.Write{
				pgstore.Exec{SQL: "INSERT INTO " + sh.orders + " (id, sku) VALUES (@id, 'pear')", Args: []any{pgx.NamedArgs{"id": key + "-named"}}},
				pgstore.Exec{SQL: "INSERT INTO " + sh.orders + " (id, sku) VALUES ('" + key + "-plain', 'pear')"},
				pgstore.Exec{SQL: "INSERT INTO " + sh.orders + " (id, sku) VALUES ($1, 'pear')", Args: []any{key + "-positional"}},
			}})
		if err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
		for _, id := range []string{key + "-named", key + "-plain", key + "-positional"} {
			if !sh.hasOrder(t, id) {
				t.Fatalf("store %d: order %s missing", i, id)
			}
		}
		key += "-2"
		l = sh.claim(t, key, "a", sh.now, sh.now.Add(time.Minute))
		err = st.Complete(ctx, dedup.CompleteRequest{Lease: l, Response: []byte("r"), Now: sh.now, ExpiresAt: sh.now.Add(time.Hour),
			Writes: []dedup.Write{pgstore.Exec{SQL: "ROLLBACK; INSERT INTO " + sh.orders + " (id, sku) VALUES ($1, 'pear')", Args: []any{key}}}})
		if err == nil || sh.hasOrder(t, key) || sh.status(t, key) != dedup.StatusPending {
			t.Fatalf("store %d: two statements in one Exec: %v, order stored %v, record %s", i, err, sh.hasOrder(t, key), sh.status(t, key))
		}
	}
}
