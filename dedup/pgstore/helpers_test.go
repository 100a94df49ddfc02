package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// pool connects to the test server (ONCEQ_POSTGRES_URL).
func pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// uniqueName is a fresh table name for one test.
func uniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// recordsTable creates a fresh records table, dropped after the test.
func recordsTable(t *testing.T, p *pgxpool.Pool) string {
	t.Helper()
	name := uniqueName("onceq_test")
	if err := pgstore.CreateTable(testCtx(t), p, name); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() {
		_, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+name+", "+pgstore.OffsetsTable(name))
	})
	return name
}

// newStore is pgstore.New on db over table, with opts.
func newStore(tb testing.TB, db pgstore.DB, table string, opts ...pgstore.Option) *pgstore.Store {
	tb.Helper()
	s, err := pgstore.New(db, append([]pgstore.Option{pgstore.WithTable(table)}, opts...)...)
	if err != nil {
		tb.Fatalf("pgstore.New: %v", err)
	}
	return s
}

// proxiedPool is a pool of one connection to the test server through a
// proxy whose faults the test injects.
func proxiedPool(t *testing.T) (*pgxpool.Pool, *faultproxy.TCP) {
	t.Helper()
	cfg, proxy := proxiedConfig(t)
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db, proxy
}
