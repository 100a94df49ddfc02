package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// create-table -store postgres makes a table pgstore's Check accepts, and
// running it again is no error.
func TestCreateTablePostgres(t *testing.T) {
	url := testenv.PostgresURL(t)
	table := tableName(t)
	for range 2 { // a second run finds the table and index there
		code, out, errOut := onceq("create-table", "-store", "postgres", "-url", url, "-table", table)
		if code != 0 || !strings.Contains(out, table) {
			t.Fatalf("exit %d, out %q, err %q", code, out, errOut)
		}
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	defer conn.Exec(context.Background(), "DROP TABLE "+table)
	s, err := pgstore.New(conn, pgstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check of the created table: %v", err)
	}
	if code, _, _ := onceq("create-table", "-store", "mysql"); code != 2 {
		t.Fatalf("an unknown store: exit %d, want 2", code)
	}
}
