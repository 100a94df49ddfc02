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

// inspectQuery is the record inspect looks for in a PostgreSQL or Redis
// store: by its stored key, or by keyHash.
type inspectQuery struct {
	table         string
	key           string // the stored key, when keyHash is ""
	keyHash       string
	scanLimit     int
	response, raw bool
	kafka         bool // the key is a Kafka record's
}

func inspectPostgres(ctx context.Context, sf *storeFlags, q inspectQuery, stdout, stderr io.Writer) int {
	if q.table == "" {
		q.table = dedup.DefaultTable
	}
	conn, _, err := sf.connectPostgres(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "onceq inspect: %s\n", field(err.Error()))
		return 1
	}
	defer conn.Close(context.WithoutCancel(ctx))
	store, err := openPostgres(conn, q.table)
	if err != nil {
		fmt.Fprintf(stderr, "onceq inspect: %s\n", field(err.Error()))
		return 1
	}
	where := "table " + q.table
	if q.keyHash != "" {
		res, err := store.FindKeyHash(ctx, q.keyHash, q.scanLimit)
		if err != nil {
			fmt.Fprintf(stderr, "onceq inspect: %s\n", field(err.Error()))
			return 1
		}
		s := keyHashScan{records: res.Records, scanned: res.Scanned, exhausted: res.Exhausted, unmatchable: res.Unmatchable, unit: "row"}
		return s.print(stdout, stderr, q, where)
	}
	rec, err := store.Get(ctx, q.key)
	return printFound(stdout, stderr, q, where, rec, err)
}

// keyHashScan is what a key_hash lookup read, for the lines every store
// prints alike.
type keyHashScan struct {
	records     []dedup.Record
	scanned     int
	exhausted   bool
	unmatchable int
	unit        string // what was read: "row", "key"
}

func (s keyHashScan) count() string { return plural(s.scanned, s.unit) }

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

func (s keyHashScan) print(stdout, stderr io.Writer, q inspectQuery, where string) int {
	if len(s.records) == 0 {
		if s.exhausted {
			fmt.Fprintf(stderr, "onceq inspect: no record with key_hash %s in %s: read all %s\n", q.keyHash, where, s.count())
		} else {
			fmt.Fprintf(stderr, "onceq inspect: key_hash %s not found within %s of %s (-scan-limit %d), which may hold more: raise -scan-limit to read further\n",
				q.keyHash, s.count(), where, q.scanLimit)
		}
		if s.unmatchable > 0 {
			fmt.Fprintf(stderr, "onceq inspect: %d of the %ss read store their key as a hash (keys over 1,024 bytes), which -key-hash cannot match; look those up by KEY\n", s.unmatchable, s.unit)
		}
		return 1
	}
	found := "a record"
	if len(s.records) > 1 {
		found = fmt.Sprintf("%d records", len(s.records))
	}
	fmt.Fprintf(stderr, "key_hash %s: %s in %s, found by reading %s\n", q.keyHash, found, where, s.count())
	return printRecords(stdout, stderr, q, s.records)
}

// printFound prints the record a Get found, or says why there is none.
func printFound(stdout, stderr io.Writer, q inspectQuery, where string, rec dedup.Record, err error) int {
	if errors.Is(err, dedup.ErrNotFound) {
		// The key is the operator's own, given on the command line.
		fmt.Fprintf(stderr, "onceq inspect: no record for stored key %q in %s\n", q.key, where)
		if q.kafka {
			fmt.Fprintln(stderr, "onceq inspect: topic, record key and value must be the record's byte for byte: a trailing newline counts")
		}
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "onceq inspect: %s\n", field(err.Error()))
		return 1
	}
	return printRecords(stdout, stderr, q, []dedup.Record{rec})
}

func printRecords(stdout, stderr io.Writer, q inspectQuery, recs []dedup.Record) int {
	if q.response {
		if len(recs) > 1 {
			fmt.Fprintf(stderr, "onceq inspect: -response: %d records match; their responses would run together\n", len(recs))
			return 1
		}
		printResponse(stdout, stderr, recs[0], q.raw)
		return 0
	}
	now := time.Now()
	for i, r := range recs {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printRecord(stdout, r, now)
	}
	return 0
}
