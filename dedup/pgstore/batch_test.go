package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/dedup/storetest"
)

// inserts are the batch cases' business writes: rows of a table of ids
// beside table, each Exec refused (a unique violation) when its id is
// already in it.
func inserts(t *testing.T, p *pgxpool.Pool, table string) func(*testing.T, dedup.Store) storetest.Inserts {
	ids := table + "_ids"
	if _, err := p.Exec(testCtx(t), "CREATE TABLE "+ids+" (id text PRIMARY KEY)"); err != nil {
		t.Fatalf("creating the ids table: %v", err)
	}
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+ids) })
	return func(*testing.T, dedup.Store) storetest.Inserts {
		return storetest.Inserts{
			Insert: func(id string) any {
				return pgstore.Exec{SQL: "INSERT INTO " + ids + " (id) VALUES ($1)", Args: []any{id}}
			},
			Inserted: func(t *testing.T, id string) bool {
				var n int
				if err := p.QueryRow(testCtx(t), "SELECT count(*) FROM "+ids+" WHERE id = $1", id).Scan(&n); err != nil {
					t.Fatalf("reading the ids table: %v", err)
				}
				return n == 1
			},
		}
	}
}
