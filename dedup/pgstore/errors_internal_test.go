package pgstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceq/onceq/internal/testsupport/testenv"
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

// Each error the store makes itself from the catalog reads as PostgreSQL's
// own do through the store's wrapper: every segment of its text says
// something, and it names the table.
func TestCatalogErrorsHaveNoEmptySegment(t *testing.T) {
	s := &Store{table: "orders_records"}
	o := &Outbox{s: s}
	for what, err := range map[string]error{
		"records table missing": s.wrap("get", s.missing()),
		"privileges missing":    s.wrap("check", s.unprivileged()),
		"offsets table missing": s.wrap("batch-acquire", s.missingOffsets()),
		"outbox tables missing": o.wrap("outbox-lease", o.missing()),
	} {
		if at := testenv.EmptySegment(err.Error()); at != "" {
			t.Errorf("%s: %q has an empty segment at %s", what, err, at)
		}
		if !strings.Contains(err.Error(), "orders_records") || retry.Classify(err) != retry.Misconfigured {
			t.Errorf("%s: %q (%v), want Misconfigured naming the table", what, err, retry.Classify(err))
		}
	}
}
