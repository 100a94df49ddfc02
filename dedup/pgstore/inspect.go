package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
)

// KeyHashSearch is what FindKeyHash found and what it read.
type KeyHashSearch struct {
	// Records are the matching records. Usually one; two only if 48-bit
	// hashes collide.
	Records []dedup.Record
	// Scanned counts the rows read.
	Scanned int
	// Exhausted: the scan reached the end of the table. When false and
	// Records is empty, the limit stopped the scan before it could tell.
	Exhausted bool
	// Unmatchable counts the rows read whose key is stored as its SHA-256
	// (a key longer than 1,024 bytes): its key hash cannot be computed
	// from the row, so FindKeyHash cannot match it.
	Unmatchable int
}

// FindKeyHash looks for the records whose key has dedup.KeyHash keyHash
// (12 hex digits): the key_hash that logs and error texts carry instead of
// the key. The table is not indexed by that hash (keeping it would cost
// every claim an index write), so the server reads at most limit rows,
// hashing each key, in one statement; nothing is written.
func (s *Store) FindKeyHash(ctx context.Context, keyHash string, limit int) (KeyHashSearch, error) {
	var res KeyHashSearch
	if len(keyHash) != 12 || strings.Trim(keyHash, "0123456789abcdef") != "" {
		return res, s.wrap("find-key-hash", fmt.Errorf("%w: key hash %q, want 12 lowercase hex digits", ErrInvalidConfig, keyHash))
	}
	if limit < 1 {
		return res, s.wrap("find-key-hash", fmt.Errorf("%w: scan limit %d, want at least 1", ErrInvalidConfig, limit))
	}
	st, err := s.sql(ctx)
	if err != nil {
		return res, s.wrap("find-key-hash", err)
	}
	q, err := s.qualified(ctx)
	if err != nil {
		return res, s.wrap("find-key-hash", err)
	}
	// One row past the limit tells whether the table holds more. A key
	// stored as itself is the id after its tag byte 0; tag 1 is a hash.
	var more bool
	var keys [][]byte
	err = s.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE n <= $2), count(*) FILTER (WHERE n <= $2 AND get_byte(id, 0) = 1), count(*) > $2,
	coalesce(array_agg(substr(id, 2)) FILTER (WHERE n <= $2 AND get_byte(id, 0) = 0
		AND left(encode(sha256(substr(id, 2)), 'hex'), 12) = $1::text), '{}')
FROM (SELECT id, row_number() OVER () AS n FROM `+q+` LIMIT $2 + 1) AS s`, keyHash, limit).Scan(&res.Scanned, &res.Unmatchable, &more, &keys)
	if err != nil {
		return res, s.wrap("find-key-hash", err)
	}
	res.Exhausted = !more
	for _, k := range keys {
		r, err := s.read(ctx, st, s.db, string(k))
		if errors.Is(err, dedup.ErrNotFound) {
			continue // expired and cleaned up since the scan
		}
		if err != nil {
			return res, s.wrap("find-key-hash", err)
		}
		res.Records = append(res.Records, r)
	}
	return res, nil
}

// TableInfo is the records table as the server's catalog describes it.
type TableInfo struct {
	// Name is the table's schema-qualified name, quoted as SQL writes it.
	Name string
	// Problems name each way the table's columns or key differ from the
	// layout CreateTable makes; a Store cannot work on such a table.
	Problems []string
	// ExpiryIndex: an index leads with expires_at, which DeleteExpired and
	// Cleanup need to find expired rows without reading the table.
	ExpiryIndex bool
	// Rows is the planner's estimate of the rows (-1: never analyzed),
	// Bytes the table's size with its indexes and TOAST.
	Rows, Bytes int64
}

// columns are the record's columns and types as CreateTable makes them,
// in format_type's spelling.
var columns = [][2]string{
	{"id", "bytea"}, {"status", "text"}, {"version", "bigint"}, {"owner", "text"}, {"payload_hash", "text"},
	{"response", "bytea"}, {"attempts", "integer"}, {"last_error", "text"},
	{"created_at", "timestamp with time zone"}, {"expires_at", "timestamp with time zone"}, {"takeovers", "integer"},
}

// Describe reads the table's layout from the catalog: its columns and
// their types, its key on id, its expiry index, and its size. A table
// that does not exist is an error, as in Check.
func (s *Store) Describe(ctx context.Context) (TableInfo, error) {
	q, err := s.qualified(ctx)
	if err != nil {
		return TableInfo{}, s.wrap("describe", err)
	}
	info := TableInfo{Name: q}
	var names, kinds []string
	err = s.db.QueryRow(ctx, `SELECT coalesce(array_agg(a.attname::text), '{}'), coalesce(array_agg(pg_catalog.format_type(a.atttypid, a.atttypmod)), '{}')
	FROM pg_catalog.pg_attribute a
	WHERE a.attrelid = pg_catalog.to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped`, q).Scan(&names, &kinds)
	if err != nil {
		return info, s.wrap("describe", err)
	}
	types := map[string]string{}
	for i, n := range names {
		types[n] = kinds[i]
	}
	for _, c := range columns {
		switch got, ok := types[c[0]]; {
		case !ok:
			info.Problems = append(info.Problems, fmt.Sprintf("no column %s (%s)", c[0], c[1]))
		case got != c[1]:
			info.Problems = append(info.Problems, fmt.Sprintf("column %s is %s, want %s", c[0], got, c[1]))
		}
	}
	var key bool
	err = s.db.QueryRow(ctx, `SELECT
	EXISTS (SELECT 1 FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE i.indrelid = c.oid AND i.indisunique AND i.indnkeyatts = 1 AND i.indpred IS NULL AND a.attname = 'id'),
	EXISTS (SELECT 1 FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE i.indrelid = c.oid AND a.attname = 'expires_at'),
	c.reltuples::bigint, pg_catalog.pg_total_relation_size(c.oid)
	FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass($1::text)`, q).Scan(&key, &info.ExpiryIndex, &info.Rows, &info.Bytes)
	if err != nil {
		return info, s.wrap("describe", err)
	}
	if !key {
		// Claims insert with ON CONFLICT (id): without a unique key on id
		// they fail, and two claims of one key would both win.
		info.Problems = append(info.Problems, "no primary key (or unique index) on id alone")
	}
	return info, nil
}

// qualified is the table's schema-qualified name, quoted; a table that
// does not exist is the error Check returns for it.
func (s *Store) qualified(ctx context.Context) (string, error) {
	var q string
	err := s.db.QueryRow(ctx, resolveSQL, quote(s.table)).Scan(&q)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", s.missing()
	}
	return q, err
}

// ExpiredRows counts the rows that expired before before, up to limit:
// rows Cleanup (or a DeleteExpired job) has not deleted yet. It reads the
// expiry index, at most limit entries.
func (s *Store) ExpiredRows(ctx context.Context, before time.Time, limit int) (int, error) {
	q, err := s.qualified(ctx)
	if err != nil {
		return 0, s.wrap("expired-rows", err)
	}
	var n int
	err = s.db.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+q+` WHERE expires_at < $1 LIMIT $2) AS expired`, before, limit).Scan(&n)
	return n, s.wrap("expired-rows", err)
}
