package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
)

// openPostgres is the Store over table on conn; the one place the command
// builds one, so that a constructor that can fail is a one-line change.
func openPostgres(conn pgstore.DB, table string) (*pgstore.Store, error) {
	return pgstore.New(conn, pgstore.WithTable(table))
}

// staleRows bounds the expired rows check counts.
const staleRows = 10000

func createPostgresTable(ctx context.Context, sf *storeFlags, table string, stdout, stderr io.Writer) int {
	conn, _, err := sf.connectPostgres(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "onceq create-table: %s\n", field(err.Error()))
		return 1
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if table == "" {
		table = dedup.DefaultTable
	}
	if err := pgstore.CreateTable(ctx, conn, table); err != nil {
		fmt.Fprintf(stderr, "onceq create-table: %s\n", field(err.Error()))
		return 1
	}
	fmt.Fprintf(stdout, "table %s exists in PostgreSQL (with its expires_at index)\n", field(table))
	return 0
}

// checkPostgres checks what a worker on table needs of PostgreSQL: the
// server answers this user, the table exists in create-table's layout,
// and the user may read, insert and update it.
func checkPostgres(ctx context.Context, r *checkReport, sf *storeFlags, table string) {
	if table == "" {
		table = dedup.DefaultTable
	}
	conn, server, err := sf.connectPostgres(ctx)
	if err != nil {
		r.fail(server, "%s", errText(err, server))
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	r.ok(server, "connected (server %s)", conn.PgConn().ParameterStatus("server_version"))
	subject := "table " + table
	store, err := openPostgres(conn, table)
	if err != nil {
		r.fail(subject, "%v", err)
		return
	}
	var pe *pgconn.PgError
	switch err := store.Check(ctx); {
	case errors.As(err, &pe) && pe.Code == "42P01":
		r.fail(subject, "does not exist: create it with `onceq create-table -store postgres -table %s`", table)
		return
	case err != nil:
		r.fail(subject, "%v", err)
		return
	}
	info, err := store.Describe(ctx)
	if err != nil {
		r.fail(subject, "%v", err)
		return
	}
	if len(info.Problems) > 0 {
		r.fail(subject, "not the layout create-table makes: %s", strings.Join(info.Problems, "; "))
		return
	}
	if !info.ExpiryIndex {
		r.warn(subject, "no index on expires_at: pgstore's Cleanup reads the whole table to find expired records; `onceq create-table -store postgres -table %s` adds it", table)
	}
	// A record is deleted by Cleanup 10 minutes past its expiry, in sweeps
	// a minute apart: rows an hour past it mean nothing deletes them.
	if info.ExpiryIndex {
		switch n, err := store.ExpiredRows(ctx, time.Now().Add(-time.Hour), staleRows); {
		case err != nil:
			r.fail(subject, "%v", err)
			return
		case n >= staleRows:
			r.warn(subject, "%d or more rows expired over an hour ago: no pgstore Cleanup (or DeleteExpired job) deletes them; they cost storage, not correctness", n)
		case n > 0:
			r.warn(subject, "%s expired over an hour ago: no pgstore Cleanup (or DeleteExpired job) deletes them; they cost storage, not correctness", plural(n, "row"))
		}
	}
	rows := "never analyzed"
	if info.Rows >= 0 {
		rows = fmt.Sprintf("about %d rows", info.Rows)
	}
	r.ok(subject, "exists as %s, the layout of create-table, SELECT, INSERT and UPDATE granted (%s, %s with indexes)", info.Name, rows, bytesText(info.Bytes))
}

// errText is err's text without the server's name when the line's
// subject already names it.
func errText(err error, server string) string {
	var se *serverError
	if errors.As(err, &se) && se.server == server {
		return "cannot connect: " + se.err.Error()
	}
	return err.Error()
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d kB", n/1024)
	}
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}
