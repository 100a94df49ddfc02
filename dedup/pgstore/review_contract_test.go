package pgstore_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup/pgstore"
)

// A nil *pgxpool.Pool (a pool whose pgxpool.New error went unread) is no
// database: New refuses it as it refuses a nil DB, rather than handing out
// a Store whose first call, or its outbox relay's, crashes the process.
func TestReviewNewRefusesNilPool(t *testing.T) {
	var pool *pgxpool.Pool
	st, err := pgstore.New(pool)
	if !errors.Is(err, pgstore.ErrInvalidConfig) {
		t.Fatalf("New(nil *pgxpool.Pool) = %v, %v; want ErrInvalidConfig", st, err)
	}
}
