package pgstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceq/onceq/retry"
)

func TestClassOf(t *testing.T) {
	for code, want := range map[string]retry.Class{
		"40001": retry.Transient, "40P01": retry.Transient, "08006": retry.Transient, "57P01": retry.Transient,
		"42P01": retry.Misconfigured, "42809": retry.Misconfigured, "42501": retry.Misconfigured, "28P01": retry.Misconfigured, "3D000": retry.Misconfigured,
		"22021": retry.Permanent, "54000": retry.Permanent,
	} {
		err := fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code})
		if got := retry.Classify((&Store{table: "t"}).wrap("claim", err)); got != want {
			t.Errorf("SQLSTATE %s: %v, want %v", code, got, want)
		}
	}
	if got := classOf(fmt.Errorf("x: %w", context.Canceled)); got != retry.Cancelled {
		t.Errorf("cancelled: %v", got)
	}
}
