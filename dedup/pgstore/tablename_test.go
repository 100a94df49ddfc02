package pgstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/retry"
)

// PostgreSQL cuts an identifier to its first 63 bytes: two table names
// that share them would be one table, and one service's messages would be
// answered as another's duplicates. Such a name, or one PostgreSQL would
// change otherwise (an empty part, a NUL byte), is refused by CreateTable
// and New, naming the table, before any record is written.
func TestTableNamesPostgreSQLWouldChangeRefused(t *testing.T) {
	p := pool(t)
	ctx := testCtx(t)
	long := uniqueName(strings.Repeat("t", 60)) // 73 bytes
	// PostgreSQL's name for all of them, should one be made.
	t.Cleanup(func() { _, _ = p.Exec(ctx, "DROP TABLE IF EXISTS "+long[:63]) })
	// The same first 63 bytes, as the service beside it would configure.
	refused(t, "CreateTable", pgstore.CreateTable(ctx, p, long[:63]+"_other"), long[:63]+"_other")
	for _, name := range []string{long, "public." + long, long + ".records", "a..b", ".records", "records.", "rec\x00ords",
		strings.Repeat("é", 32)} {
		refused(t, "CreateTable", pgstore.CreateTable(ctx, p, name), name)
		s, err := pgstore.New(p, pgstore.WithTable(name))
		if refused(t, "New", err, name) && s != nil {
			t.Errorf("New of table %q: a Store with its refusal", name)
		}
	}
	// 63 bytes fit, in every part.
	fits := uniqueName(strings.Repeat("f", 63-13))
	if err := pgstore.CreateTable(ctx, p, "public."+fits); err != nil {
		t.Fatalf("a %d-byte name: %v", len(fits), err)
	}
	t.Cleanup(func() { _, _ = p.Exec(ctx, "DROP TABLE IF EXISTS "+fits) })
	if err := newStore(t, p, "public."+fits).Check(ctx); err != nil {
		t.Fatalf("Check of a %d-byte name: %v", len(fits), err)
	}
}

func refused(t *testing.T, what string, err error, table string) bool {
	t.Helper()
	var te *pgstore.TableNameError
	if !errors.As(err, &te) || te.Table != table || !errors.Is(err, pgstore.ErrInvalidConfig) ||
		retry.Classify(err) != retry.Misconfigured || !strings.Contains(err.Error(), table) {
		t.Errorf("%s of table %q: %v (%T), want a *TableNameError naming it, ErrInvalidConfig, misconfigured", what, table, err, err)
		return false
	}
	return true
}
