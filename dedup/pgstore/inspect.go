package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/outbox"
)

// KeyHashSearch is what FindKeyHash found and what it read: Records the
// matching records, Scanned the rows read (Unit says "rows"), Exhausted
// whether every row was read, and Unmatchable the rows read whose key is
// stored as its SHA-256 (a key longer than 1,024 bytes; HashedKeys says
// which). Metered and ReadUnits stay zero: PostgreSQL bills no reads.
type KeyHashSearch = dedup.KeyHashSearch

var _ dedup.Inspector = (*Store)(nil)

// FindKeyHash looks for the records whose key has dedup.KeyHash keyHash
// (12 hex digits): the key_hash that logs and error texts carry instead of
// the key. The table is not indexed by that hash (keeping it would cost
// every claim an index write), so the server reads at most limit rows,
// hashing each key, in one statement; nothing is written. It implements
// dedup.Inspector.
func (s *Store) FindKeyHash(ctx context.Context, keyHash string, limit int) (KeyHashSearch, error) {
	res := KeyHashSearch{Unit: "row", HashedKeys: "keys over 1,024 bytes"}
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

// List implements dedup.Inspector: the rows f selects, oldest first, in
// one statement. A record whose key is stored as its SHA-256 (a key over
// 1,024 bytes) is listed with Key "", and never by tenant.
func (s *Store) List(ctx context.Context, f dedup.ListFilter) ([]dedup.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, s.wrap("list", fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	q, err := s.qualified(ctx)
	if err != nil {
		return nil, s.wrap("list", err)
	}
	var prefix []byte
	if f.Tenant != "" {
		p, err := dedup.TenantPrefix(f.Tenant)
		if err != nil {
			return nil, s.wrap("list", err)
		}
		prefix = rowID(p)
	}
	var since *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	// A transaction for its Query, which DB does not have; it writes
	// nothing, and is rolled back.
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, s.wrap("list", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, `SELECT id, `+recordCols+` FROM `+q+`
	WHERE ($1::text = '' OR status = $1::text) AND ($2::timestamptz IS NULL OR created_at >= $2::timestamptz)
		AND ($3::bytea IS NULL OR substr(id, 1, length($3::bytea)) = $3::bytea)
	ORDER BY created_at LIMIT $4`, string(f.Status), since, prefix, f.Limit)
	if err != nil {
		return nil, s.wrap("list", err)
	}
	defer rows.Close()
	var out []dedup.Record
	for rows.Next() {
		var id []byte
		var r dedup.Record
		var status string
		if err := rows.Scan(&id, &status, &r.Version, &r.Owner, &r.PayloadHash, &r.Response,
			&r.Attempts, &r.LastError, &r.CreatedAt, &r.ExpiresAt, &r.Takeovers); err != nil {
			return nil, s.wrap("list", scanned("", err))
		}
		if len(id) > 0 && id[0] == 0 {
			r.Key = string(id[1:])
		}
		r.Status = dedup.Status(status)
		if err := valid(&r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, s.wrap("list", rows.Err())
}

// OutboxEntries implements dedup.Inspector: Outbox().Entries.
func (s *Store) OutboxEntries(ctx context.Context, state outbox.State, limit int) ([]outbox.Entry, error) {
	return s.outbox.Entries(ctx, state, limit)
}
