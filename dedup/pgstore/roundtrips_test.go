package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
)

// A commit with a business write and an ordered outgoing message is
// BEGIN, the claim, one pipeline of the write and the outbox's one
// statement, and COMMIT; a relay's lease is one statement.
func TestOutboxRoundTrips(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	cfg.MinConns = 1
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx := testCtx(t)
	table := recordsTable(t, p)
	side := table + "_side"
	if _, err := p.Exec(ctx, "CREATE TABLE "+side+" (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+side) })
	s := newStore(t, p, table)
	commit := func(key string) (int64, error) {
		now := time.Now()
		before := rt.n.Load()
		_, err := s.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: key, Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour),
			Writes: []dedup.Write{pgstore.Exec{SQL: "INSERT INTO " + side + " (id) VALUES ($1)", Args: []any{key}, MustAffect: true}},
			Outbox: []outbox.Message{{Destination: "t", OrderingKey: "lane", Body: []byte("b")}}})
		return rt.n.Load() - before, err
	}
	// The first commit finds the tables and prepares the statements.
	if _, err := commit("warm"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		n, err := commit(fmt.Sprint("k", i))
		if err != nil {
			t.Fatal(err)
		}
		if n != 4 {
			t.Errorf("commit %d: %d round trips, want 4 (BEGIN, claim, writes with the outbox, COMMIT)", i, n)
		}
	}
	// A write that fails its condition takes the outgoing messages back.
	if _, err := p.Exec(ctx, "INSERT INTO "+side+" (id) VALUES ('taken')"); err != nil {
		t.Fatal(err)
	}
	var bc *dedup.BusinessConditionError
	if _, err := commit("taken"); !errors.As(err, &bc) || bc.Index != 0 {
		t.Fatalf("a business write that breaks a constraint: %v, want a *dedup.BusinessConditionError of write 0", err)
	}
	before := rt.n.Load()
	entries, err := s.Outbox().Lease(ctx, outbox.LeaseRequest{Owner: "r", Now: time.Now(), LeaseUntil: time.Now().Add(time.Minute), Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	if n := rt.n.Load() - before; n != 1 {
		t.Errorf("lease: %d round trips, want 1", n)
	}
	if len(entries) != 4 {
		t.Errorf("leased %d entries, want the 4 committed", len(entries))
	}
	for i := 1; i < len(entries); i++ {
		if entries[i].Seq <= entries[i-1].Seq {
			t.Errorf("lane out of order: %d after %d", entries[i].Seq, entries[i-1].Seq)
		}
	}
}
