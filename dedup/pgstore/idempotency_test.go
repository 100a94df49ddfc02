package pgstore_test

import (
	"context"
	"os"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/idempotency/idemtest"
)

// The Idempotency-Key middleware over PostgreSQL, the handler's payment
// row written in the transaction that writes COMPLETED.
func TestIdempotencyKey(t *testing.T) {
	p := pool(t)
	idemtest.Run(t, func(t *testing.T) dedup.Store { return newStore(t, p, recordsTable(t, p)) }, idemtest.Options{
		Effect: func(t *testing.T, _ dedup.Store) idemtest.Effect {
			table := paymentsTable(t, p)
			return idemtest.Effect{
				Write: func(id string) dedup.Write { return paymentWrite(table, id) },
				Count: func(t *testing.T, id string) int { return applied(t, p, table, id) },
			}
		},
	})
}

// paymentsTable creates a table of payments (id, times applied), dropped
// after the test.
func paymentsTable(t *testing.T, p pgstore.DB) string {
	t.Helper()
	table := uniqueName("onceq_payments")
	if _, err := p.Exec(testCtx(t), "CREATE TABLE "+table+" (id text PRIMARY KEY, n int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	return table
}

// applied is how many times the payment id was written.
func applied(t *testing.T, p pgstore.DB, table, id string) int {
	t.Helper()
	var n int
	err := p.QueryRow(testCtx(t), "SELECT coalesce((SELECT n FROM "+table+" WHERE id = $1), 0)", id).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A server killed with SIGKILL mid-request, then restarted: the retry
// applies the payment once.
func TestIdempotencyKeyServerKilled(t *testing.T) {
	idemtest.RunKilled(t, idemtest.Killed{
		Setup: func(t *testing.T) {
			p := pool(t)
			t.Setenv("ONCEQ_IDEMTEST_RECORDS", recordsTable(t, p))
			t.Setenv("ONCEQ_IDEMTEST_PAYMENTS", paymentsTable(t, p))
		},
		Store: func(t *testing.T) dedup.Store {
			return newStore(t, pool(t), os.Getenv("ONCEQ_IDEMTEST_RECORDS"))
		},
		Effect: func(t *testing.T, _ dedup.Store) idemtest.Effect {
			p, table := pool(t), os.Getenv("ONCEQ_IDEMTEST_PAYMENTS")
			return idemtest.Effect{
				Write: func(id string) dedup.Write { return paymentWrite(table, id) },
				Count: func(t *testing.T, id string) int { return applied(t, p, table, id) },
			}
		},
	})
}

// paymentWrite records one application of payment id in table.
func paymentWrite(table, id string) pgstore.Exec {
	return pgstore.Exec{SQL: "INSERT INTO " + table + " (id, n) VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET n = " + table + ".n + 1",
		Args: []any{id}}
}
