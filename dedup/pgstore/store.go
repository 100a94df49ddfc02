package pgstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/retry"
)

// DB is what the Store needs of a connection: *pgxpool.Pool has it (and a
// single *pgx.Conn, for tests and tools).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// querier is a DB or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store is the PostgreSQL dedup.Store. It is safe for concurrent use.
type Store struct {
	db    DB
	table string // as given, for errors
	// instr are the retries, metrics, hooks, logger and spans every store
	// has (package storeinstr).
	instr *storeinstr.Instruments
	// stmts are the statements, made on first use with the table's name
	// qualified by the schema it was found in, so that a search_path a
	// business write sets on a pooled connection cannot send them to
	// another schema's table.
	stmts atomic.Pointer[statements]
	// maxResponse bounds a stored response (MaxResponseSize).
	maxResponse int
	// batchStmts are the batch view's statements (Offsets), made as stmts
	// are, on first use.
	batchStmts atomic.Pointer[batchStatements]
	// outbox is the relay's view of the outbox table (Outbox).
	outbox *Outbox
}

// statements are the Store's SQL, for one schema-qualified table.
type statements struct {
	insertSQL, takeSQL, readSQL, completeSQL, failSQL, extendSQL, checkSQL, deleteSQL, resetSQL string
	// records is the table's quoted, qualified name.
	records string
}

// Option configures a Store: the options of New.
type Option interface{ apply(*config) }

type config struct {
	table       string
	maxResponse int
	instr       storeinstr.Config
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithTable sets the records table (default dedup.DefaultTable,
// "onceq_records"), which may be schema-qualified ("app.onceq_records");
// CreateTable makes it.
func WithTable(name string) Option { return optionFunc(func(c *config) { c.table = name }) }

// MaxResponseSize sets the longest response the Store keeps, in bytes
// (default dedup.DefaultMaxResponseSize; n <= 0 keeps the default). A
// longer one is refused by Complete and ClaimComplete with a
// *dedup.ResponseTooLargeError before anything is sent, and nothing is
// committed: every duplicate's claim reads the response back.
func MaxResponseSize(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxResponse = n
		}
	})
}

// WithRetryPolicy sets the backoff for transient faults (default
// retry.DefaultPolicy()): a serialization failure or deadlock, a lost
// connection, a server shutting down or out of connections.
func WithRetryPolicy(p retry.Policy) Option {
	return optionFunc(func(c *config) { c.instr.Policy = p })
}

// Hook is an observer of the store, given to WithHooks: it implements
// storeinstr.HookStoreCall (every statement or transaction sent), storeinstr.HookStoreRetry
// (every retry), or both. It is every store's Hook (storeinstr.Hook), so
// one observer serves them all; New refuses one that implements none, so
// a misspelt method is an error, not silence.
type Hook = storeinstr.Hook

// WithHooks adds observers (see Hook).
func WithHooks(hooks ...Hook) Option {
	return optionFunc(func(c *config) { c.instr.Hooks = append(c.instr.Hooks, hooks...) })
}

// WithLogger sets the logger for retries and faults given up on (when
// given none, the logger of the Consumer or Guard that uses the store,
// else slog.Default(); nil counts as none).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.instr.Logger = l }) }

// WithMeterProvider sets where the store's metrics go (default the global
// MeterProvider): db.client.operation.duration, onceq.store.errors and
// onceq.store.retries, as every store has them (see package storeinstr),
// with db.system.name postgresql.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.instr.MeterProvider = mp })
}

// WithTracerProvider sets where the spans of the store's requests go
// (default the global TracerProvider): a client span per request, retries
// included, under the caller's span when that one is recorded.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.instr.TracerProvider = tp })
}

var _ dedup.Store = (*Store)(nil)

// Capabilities implements dedup.Store: ClaimComplete works, the business
// writes are Exec, *Exec, Func and a plain func of Func's type, outgoing
// messages commit with COMPLETED (the relay's view, Outbox, is handed
// over), and so do batch mode's offset rows (the batch view, Offsets);
// the Store is its own Inspector.
func (s *Store) Capabilities() dedup.Capabilities {
	return dedup.Capabilities{ClaimComplete: true, Writes: Kind, Outbox: s.outbox, Offsets: s.Offsets(), Inspector: s, Resetter: s, Forgetter: s}
}

// Attach implements dedup.Store: the Store logs to rt.Logger unless
// WithLogger gave it one (the last non-nil one handed over, when several
// Guards share the Store), and tells every rt.Observe handed over of each
// throttle and transient fault it retries.
func (s *Store) Attach(rt dedup.Runtime) { s.instr.Attach(rt) }

// New returns a Store on db over the table of WithTable (dedup.DefaultTable
// when none). It does not touch the server: call Check before the first
// claim (the consumer does). A table name whose parts are empty, hold a
// NUL byte or are longer than PostgreSQL keeps (63 bytes; it would cut
// them, and two names that share their start would be one table) is
// refused with a *TableNameError; every error wraps ErrInvalidConfig.
func New(db DB, opts ...Option) (*Store, error) {
	cfg := config{table: dedup.DefaultTable, maxResponse: dedup.DefaultMaxResponseSize}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if db == nil || configerr.NilValue(db) {
		return nil, fmt.Errorf("pgstore: %w: no database", ErrInvalidConfig)
	}
	if err := checkName(cfg.table); err != nil {
		return nil, (&Store{table: cfg.table}).wrap("new", err)
	}
	in, err := storeinstr.New(storeinstr.SystemPostgreSQL, "pgstore", errorCode, cfg.instr)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, table: cfg.table, instr: in, maxResponse: cfg.maxResponse}
	s.outbox = &Outbox{s: s}
	return s, nil
}

// maxIdentifier is the longest identifier PostgreSQL keeps, in bytes
// (NAMEDATALEN - 1); it cuts a longer one to that many.
const maxIdentifier = 63

// checkName refuses a table name that would not name, as given, the
// table PostgreSQL uses.
func checkName(table string) error {
	for part := range strings.SplitSeq(table, ".") {
		switch {
		case part == "":
			return &TableNameError{Table: table, Reason: "an empty part (want table or schema.table)"}
		case strings.IndexByte(part, 0) >= 0:
			return &TableNameError{Table: table, Reason: "a NUL byte"}
		case len(part) > maxIdentifier:
			return &TableNameError{Table: table, Reason: fmt.Sprintf("a part of %d bytes; PostgreSQL keeps the first %d, so longer names that share them are one table", len(part), maxIdentifier)}
		}
	}
	return nil
}

// missing is the error of a records table that is not visible: named,
// with what makes it.
func (s *Store) missing() error {
	return catalogError("42P01", "the records table %s does not exist (or is not on the search_path): "+
		"run pgstore.CreateTable, or onceq create-table -store postgres -table %s", s.table, s.table)
}

// unprivileged is the error of a records table the role cannot claim in.
func (s *Store) unprivileged() error {
	return catalogError("42501", "the role lacks SELECT, INSERT or UPDATE on the records table %s", s.table)
}

// resolveSQL is the table's schema-qualified name, quoted, or no row when
// no such table is visible. Every name it uses is pg_catalog's, which the
// search_path never hides.
const resolveSQL = `SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname)
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE c.oid = pg_catalog.to_regclass($1::text)`

// sql returns the statements, finding the table's schema on the first
// call that finds the table (one round trip, once).
func (s *Store) sql(ctx context.Context) (*statements, error) {
	if st := s.stmts.Load(); st != nil {
		return st, nil
	}
	var q string
	err := s.db.QueryRow(ctx, resolveSQL, quote(s.table)).Scan(&q)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, s.missing()
	}
	if err != nil {
		return nil, err
	}
	s.stmts.CompareAndSwap(nil, newStatements(q))
	return s.stmts.Load(), nil
}

// recordCols are the records table's columns but id.
const recordCols = "status, version, owner, payload_hash, response, attempts, last_error, created_at, expires_at, takeovers"

// takeover is a claim's ON CONFLICT clause, of the records table as r:
// the record written over the one stored when that one is claimable ($6
// the claim's time, $8 that time less the skew margin), with the
// counts a claim keeps.
const takeover = `ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, version = r.version + 1, owner = EXCLUDED.owner,
		payload_hash = EXCLUDED.payload_hash, response = EXCLUDED.response,
		attempts = CASE WHEN r.status = 'COMPLETED' THEN 0 ELSE r.attempts END,
		last_error = '', created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at,
		takeovers = CASE r.status WHEN 'COMPLETED' THEN 0 WHEN 'PENDING' THEN r.takeovers + 1 ELSE r.takeovers END
	WHERE r.expires_at < CASE WHEN r.status = 'PENDING' THEN $8::timestamptz ELSE $6::timestamptz END
		-- A corrupt record is never taken over (its counts would carry
		-- on): the claim reads it and refuses it.
		AND r.status IN ('PENDING', 'COMPLETED', 'FAILED', 'DEAD_LETTER') AND r.version >= 1 AND r.attempts >= 0`

// newStatements makes the statements for q, a quoted, qualified table name.
func newStatements(q string) *statements {
	const cols = recordCols
	// What a claim reads of the record it meets: the response only of a
	// COMPLETED one, the duplicate's answer; a live lease or retry delay
	// needs none of it.
	const oldCols = "status, version, owner, payload_hash, CASE WHEN status = 'COMPLETED' THEN response END AS response, attempts, last_error, created_at, expires_at, takeovers"
	return &statements{
		records: q,
		// A claim's first statement, all a new key needs: the record
		// inserted, nothing read back.
		insertSQL: `INSERT INTO ` + q + ` (id, ` + cols + `)
	VALUES ($1::bytea, $2::text, 1, $3::text, $4::text, $5::bytea, 0, '', $6::timestamptz, $7::timestamptz, 0)
	ON CONFLICT (id) DO NOTHING`,
		// Its second, for a key that has a record, one statement: won is
		// the row written when the key was absent or its record expired
		// (beyond the skew margin for a lease, $8); old is the row as this
		// statement's snapshot saw it, what a winner replaced or a loser
		// lost to, read only when there is one (not for a fresh key:
		// version 1). A row changed by a concurrent claim after the
		// snapshot (old absent, or old claimable yet not won) is read
		// again by the caller.
		takeSQL: `WITH won AS (
	INSERT INTO ` + q + ` AS r (id, ` + cols + `)
	VALUES ($1::bytea, $2::text, 1, $3::text, $4::text, $5::bytea, 0, '', $6::timestamptz, $7::timestamptz, 0)
	` + takeover + `
	RETURNING r.version, r.attempts, r.takeovers
)
SELECT won.version, won.attempts, won.takeovers, old.status, old.version, old.owner, old.payload_hash, old.response,
	old.attempts, old.last_error, old.created_at, old.expires_at, old.takeovers
FROM (SELECT 1) AS one LEFT JOIN won ON true
	LEFT JOIN LATERAL (SELECT ` + oldCols + ` FROM ` + q + `
		WHERE (won.version IS NULL OR won.version > 1) AND id = $1::bytea) AS old ON true`,
		readSQL: `SELECT ` + cols + ` FROM ` + q + ` WHERE id = $1`,
		completeSQL: `UPDATE ` + q + ` SET status = 'COMPLETED', version = version + 1, response = $4, expires_at = $5, last_error = ''
	WHERE id = $1 AND status = 'PENDING' AND owner = $2 AND version = $3`,
		failSQL: `UPDATE ` + q + ` SET status = CASE WHEN $8::bool THEN 'DEAD_LETTER' ELSE 'FAILED' END, version = version + 1, last_error = $4, expires_at = $5,
	attempts = CASE WHEN $6::bool THEN 0 WHEN $7::bool THEN attempts ELSE attempts + 1 END,
	takeovers = CASE WHEN $6::bool THEN 0 ELSE takeovers END
	WHERE id = $1 AND status = 'PENDING' AND owner = $2 AND version = $3`,
		// What dedup.Resettable takes, at the version read.
		resetSQL: `UPDATE ` + q + ` SET status = 'FAILED', version = version + 1, attempts = 0, takeovers = 0, last_error = $3, expires_at = $4
	WHERE id = $1 AND version = $2 AND (status IN ('FAILED', 'DEAD_LETTER') OR (status = 'PENDING' AND expires_at < $4))`,
		// A lease only moves forward: greatest keeps a longer expiry.
		extendSQL: `UPDATE ` + q + ` SET expires_at = greatest(expires_at, $4)
	WHERE id = $1 AND status = 'PENDING' AND owner = $2 AND version = $3`,
		checkSQL: `SELECT has_table_privilege($1::text, 'SELECT') AND has_table_privilege($1::text, 'INSERT')
	AND has_table_privilege($1::text, 'UPDATE'), (SELECT count(*) FROM (SELECT id, ` + cols + ` FROM ` + q + ` WHERE false) AS layout)`,
		deleteSQL: `DELETE FROM ` + q + ` WHERE id IN (SELECT id FROM ` + q + ` WHERE expires_at < $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
	}
}

// Table is the records table's name, as given to New.
func (s *Store) Table() string { return s.table }

// quote makes a possibly schema-qualified name an SQL identifier.
func quote(table string) string { return pgx.Identifier(strings.Split(table, ".")).Sanitize() }

// maxInlineKey is the longest key stored as its own bytes; a btree index
// row holds at most about 2.7 kB.
const maxInlineKey = 1024

// rowID is the key as the table holds it: tag 0 and the key's bytes, or
// tag 1 and its SHA-256 for a longer key. Injective but for SHA-256
// collisions, and the tags keep the two forms apart.
func rowID(key string) []byte {
	if len(key) <= maxInlineKey {
		b := make([]byte, 1+len(key))
		copy(b[1:], key)
		return b
	}
	sum := sha256.Sum256([]byte(key))
	return append([]byte{1}, sum[:]...)
}

// Check implements dedup.Store: the table exists with the record's
// columns, and this role may read, insert and update it. A table made by
// an earlier version, without the takeovers column, is refused with what
// to run.
func (s *Store) Check(ctx context.Context) error {
	var ok bool
	err := s.instr.Do(ctx, storeinstr.OpCheck, func(ctx context.Context, _ int) error {
		st, err := s.sql(ctx)
		if err != nil {
			return s.wrap("check", err)
		}
		var n int64
		if err := s.db.QueryRow(ctx, st.checkSQL, quote(s.table)).Scan(&ok, &n); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42703" && strings.Contains(pe.Message, `"takeovers"`) {
				err = fmt.Errorf("%w: the table was made by an earlier onceq; run pgstore.CreateTable (or onceq create-table -store postgres) on it, "+
					"or ALTER TABLE %s ADD COLUMN takeovers integer NOT NULL DEFAULT 0", err, quote(s.table))
			}
			return s.wrap("check", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !ok {
		return s.wrap("check", s.unprivileged())
	}
	return nil
}

// Claim implements dedup.Store: one statement for a new key, two for a
// key that has a record (a takeover or a lost claim). A claim retried
// after a lost connection that meets its own earlier attempt's record has
// won (storeinstr.ClaimOnRetry).
func (s *Store) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	if req.Key == "" {
		return dedup.Claim{}, dedup.ErrEmptyKey
	}
	return s.claimAlone(ctx, "claim", storeinstr.OpClaim, req.Key, req.Owner, req.PayloadHash, dedup.StatusPending, nil, req.Now, req.LeaseUntil, req.SkewMargin)
}

// claimAlone is a claim outside a transaction, writing status, under the
// instruments.
func (s *Store) claimAlone(ctx context.Context, op, instrOp, key, owner, hash string, status dedup.Status, resp []byte, now, expires time.Time, margin time.Duration) (dedup.Claim, error) {
	return s.instr.Claim(ctx, instrOp, key, owner, status, func(ctx context.Context) (dedup.Claim, error) {
		st, err := s.sql(ctx)
		if err != nil {
			return dedup.Claim{}, s.wrap(op, err)
		}
		c, err := s.claim(ctx, st, s.db, key, owner, hash, status, resp, now, expires, margin)
		return c, s.wrap(op, err)
	})
}

// claim writes key's record as a winning claim writes it, or learns the
// live record that wins. A new key, the common case, costs one INSERT
// that reads nothing back; only a key with a record pays for reading it.
func (s *Store) claim(ctx context.Context, st *statements, q querier, key, owner, hash string, status dedup.Status, resp []byte, now, expires time.Time, margin time.Duration) (dedup.Claim, error) {
	id := rowID(key)
	for {
		tag, err := q.Exec(ctx, st.insertSQL, id, string(status), owner, hash, resp, now, expires)
		if err != nil {
			return dedup.Claim{}, err
		}
		if tag.RowsAffected() == 1 {
			return dedup.Claim{Acquired: true, Lease: dedup.Lease{Key: key, Owner: owner, Version: 1}, Attempt: 1}, nil
		}
		c, ok, err := s.take(ctx, st, q, id, key, owner, hash, status, resp, now, expires, margin)
		if ok || err != nil {
			return c, err
		}
		// The record was deleted (as expired) since: start over.
	}
}

// take claims a key that has a record: it takes an expired record over,
// or learns the live one. ok is false when the record is gone.
func (s *Store) take(ctx context.Context, st *statements, q querier, id []byte, key, owner, hash string, status dedup.Status, resp []byte, now, expires time.Time, margin time.Duration) (c dedup.Claim, ok bool, err error) {
	var (
		wonVersion                *int64
		wonAttempts, wonTakeovers *int
		old                       nullRecord
	)
	err = q.QueryRow(ctx, st.takeSQL, id, string(status), owner, hash, resp, now, expires, now.Add(-max(margin, 0))).
		Scan(&wonVersion, &wonAttempts, &wonTakeovers, &old.status, &old.version, &old.owner, &old.payloadHash, &old.response,
			&old.attempts, &old.lastError, &old.createdAt, &old.expiresAt, &old.takeovers)
	if err != nil {
		return dedup.Claim{}, false, scanned(key, err)
	}
	prev, err := old.record(key)
	if err != nil {
		return dedup.Claim{}, false, err
	}
	if wonVersion != nil {
		return dedup.Claim{Acquired: true, Lease: dedup.Lease{Key: key, Owner: owner, Version: *wonVersion},
			Attempt: *wonAttempts + 1, Previous: prev, Takeovers: *wonTakeovers}, true, nil
	}
	limit := now
	if prev != nil && prev.Status == dedup.StatusPending {
		limit = now.Add(-max(margin, 0))
	}
	if prev != nil && !prev.ExpiresAt.Before(limit) {
		return dedup.Claim{Existing: *prev}, true, nil
	}
	// A concurrent write changed the key after this statement's snapshot
	// (inserted it, or renewed the expired record the snapshot holds):
	// read what it wrote (a new statement sees it).
	r, err := s.read(ctx, st, q, key)
	if errors.Is(err, dedup.ErrNotFound) {
		return dedup.Claim{}, false, nil
	}
	if err != nil {
		return dedup.Claim{}, false, err
	}
	return dedup.Claim{Existing: r}, true, nil
}

// nullRecord scans a record that may be absent (the claim's outer join).
type nullRecord struct {
	status, owner, payloadHash, lastError *string
	version                               *int64
	attempts, takeovers                   *int
	response                              []byte
	createdAt, expiresAt                  *time.Time
}

// record is the record scanned, nil when absent; a row with a NULL where
// a record has a value is corrupt.
func (n *nullRecord) record(key string) (*dedup.Record, error) {
	if n.status == nil {
		return nil, nil
	}
	if n.version == nil || n.owner == nil || n.payloadHash == nil || n.attempts == nil || n.lastError == nil ||
		n.createdAt == nil || n.expiresAt == nil || n.takeovers == nil {
		return nil, corrupt(key, errors.New("a NULL column"))
	}
	r := &dedup.Record{Key: key, Status: dedup.Status(*n.status), Version: *n.version, Owner: *n.owner,
		PayloadHash: *n.payloadHash, Response: n.response, Attempts: *n.attempts, LastError: *n.lastError,
		CreatedAt: *n.createdAt, ExpiresAt: *n.expiresAt, Takeovers: *n.takeovers}
	return r, valid(r)
}

// valid refuses a record no Store writes: a status outside the four, a
// version below 1 (a record's first is 1), a negative attempt count.
func valid(r *dedup.Record) error {
	switch r.Status {
	case dedup.StatusPending, dedup.StatusCompleted, dedup.StatusFailed, dedup.StatusDeadLetter:
	default:
		return corrupt(r.Key, fmt.Errorf("status %q", r.Status))
	}
	if r.Version < 1 {
		return corrupt(r.Key, fmt.Errorf("version %d", r.Version))
	}
	if r.Attempts < 0 {
		return corrupt(r.Key, fmt.Errorf("attempts %d", r.Attempts))
	}
	return nil
}

func corrupt(key string, err error) error {
	return &dedup.CorruptRecordError{KeyHash: dedup.KeyHash(key), Err: fmt.Errorf("pgstore: %w", err)}
}

// scanned makes a row that does not scan into a record (a NULL, a time
// Go cannot hold) a corrupt record; other errors pass as they are.
func scanned(key string, err error) error {
	var se pgx.ScanArgError
	if errors.As(err, &se) {
		return corrupt(key, fmt.Errorf("column %s: %w", se.FieldName, se.Err))
	}
	return err
}

func (s *Store) read(ctx context.Context, st *statements, q querier, key string) (dedup.Record, error) {
	r := dedup.Record{Key: key}
	var status string
	err := q.QueryRow(ctx, st.readSQL, rowID(key)).Scan(&status, &r.Version, &r.Owner, &r.PayloadHash, &r.Response,
		&r.Attempts, &r.LastError, &r.CreatedAt, &r.ExpiresAt, &r.Takeovers)
	if errors.Is(err, pgx.ErrNoRows) {
		return dedup.Record{}, fmt.Errorf("%w: key_hash %s", dedup.ErrNotFound, dedup.KeyHash(key))
	}
	if err != nil {
		return dedup.Record{}, scanned(key, err)
	}
	r.Status = dedup.Status(status)
	if err := valid(&r); err != nil {
		return dedup.Record{}, err
	}
	return r, nil
}

// Get implements dedup.Store.
func (s *Store) Get(ctx context.Context, key string) (dedup.Record, error) {
	var r dedup.Record
	var notFound error
	err := s.instr.Do(ctx, storeinstr.OpGet, func(ctx context.Context, _ int) error {
		st, err := s.sql(ctx)
		if err != nil {
			return s.wrap("get", err)
		}
		r, err = s.read(ctx, st, s.db, key)
		if errors.Is(err, dedup.ErrNotFound) {
			notFound = err // an answer, not a failed request
			return nil
		}
		return s.wrap("get", err)
	})
	if err != nil {
		return dedup.Record{}, err
	}
	return r, notFound
}

// fenced turns an UPDATE's row count into the fence's answer.
func fenced(op string, tag pgconn.CommandTag, l dedup.Lease) error {
	if tag.RowsAffected() == 0 {
		return leaseLost(op, l)
	}
	return nil
}

func leaseLost(op string, l dedup.Lease) error {
	return fmt.Errorf("pgstore: %s: %w: key_hash %s version %d", op, dedup.ErrLeaseLost, dedup.KeyHash(l.Key), l.Version)
}

// update runs one fenced UPDATE of lease l (sql picks it from the
// statements) under the instruments. A retried update that lost its fence
// reads the record: when it is what the update writes (status done, one
// version on), its earlier attempt committed unseen, and the call
// succeeded ("" for an update that keeps the version, which a retry
// applies again).
func (s *Store) update(ctx context.Context, op, instrOp string, l dedup.Lease, done dedup.Status, sql func(*statements) string, args ...any) error {
	var tag pgconn.CommandTag
	var st *statements
	retried := false
	err := s.instr.Do(ctx, instrOp, func(ctx context.Context, attempt int) error {
		retried = attempt > 1
		var err error
		if st, err = s.sql(ctx); err != nil {
			return s.wrap(op, err)
		}
		tag, err = s.db.Exec(ctx, sql(st), args...)
		return s.wrap(op, err)
	})
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 && retried && done != "" {
		return s.settledOnRetry(ctx, st, op, l, done)
	}
	return fenced(op, tag, l)
}

// settledOnRetry is the answer of a fenced write of l, retried, that lost
// its fence: nil when the record is what the write leaves (its earlier
// attempt committed), else the lost lease.
func (s *Store) settledOnRetry(ctx context.Context, st *statements, op string, l dedup.Lease, done dedup.Status) error {
	var cur dedup.Record
	err := s.instr.Do(ctx, instrOps[op], func(ctx context.Context, _ int) error {
		var err error
		cur, err = s.read(ctx, st, s.db, l.Key)
		if errors.Is(err, dedup.ErrNotFound) {
			return nil
		}
		return s.wrap(op, err)
	})
	if err != nil {
		return fmt.Errorf("pgstore: %s: a retry lost the fence and the record could not be read: %w", op, err)
	}
	if storeinstr.SettledOnRetry(cur, true, l, done) {
		return nil
	}
	return leaseLost(op, l)
}

// instrOps are the instruments' names of the operations.
var instrOps = map[string]string{
	"claim": storeinstr.OpClaim, "claim-complete": storeinstr.OpClaimComplete, "complete": storeinstr.OpComplete,
	"fail": storeinstr.OpFail, "extend": storeinstr.OpExtend,
}

// Complete implements dedup.Store: one UPDATE, or with Writes a
// transaction of the fenced UPDATE first and the writes after it.
func (s *Store) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	if err := dedup.CheckResponse(req.Response, s.maxResponse); err != nil {
		return err
	}
	writes, err := asWrites(req.Writes)
	if err != nil {
		return err
	}
	if err := checkOutbox(req.Outbox); err != nil {
		return err
	}
	l := req.Lease
	args := []any{rowID(l.Key), l.Owner, l.Version, req.Response, req.ExpiresAt}
	if len(writes) == 0 && len(req.Outbox) == 0 {
		return s.update(ctx, "complete", storeinstr.OpComplete, l, dedup.StatusCompleted, func(st *statements) string { return st.completeSQL }, args...)
	}
	var st *statements
	retried := false
	err = s.tx(ctx, "complete", storeinstr.OpComplete, &st, &retried, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, st.completeSQL, args...)
		if err != nil {
			return err
		}
		if err := fenced("complete", tag, l); err != nil {
			return err
		}
		return s.writeAndSend(ctx, tx, l.Key, writes, req.Outbox, req.Now)
	})
	if retried && errors.Is(err, dedup.ErrLeaseLost) {
		// The transaction is atomic: COMPLETED by us means the writes too.
		return s.settledOnRetry(ctx, st, "complete", l, dedup.StatusCompleted)
	}
	if st == nil {
		return err
	}
	return s.ended(ctx, st, "complete", err, l.Key, l.Owner, l.Version+1)
}

// ended turns a write's ending of the transaction (an *endedError) into a
// *TxEndedError that says whether COMPLETED was committed: the record is
// read back, COMPLETED by owner at version.
func (s *Store) ended(ctx context.Context, st *statements, op string, err error, key, owner string, version int64) error {
	var ee *endedError
	if !errors.As(err, &ee) {
		return err
	}
	r, rerr := s.read(ctx, st, s.db, key)
	if rerr != nil && !errors.Is(rerr, dedup.ErrNotFound) {
		return s.wrap(op, fmt.Errorf("%w (write %d); whether COMPLETED was committed is unknown: %w", ErrTxEnded, ee.index, rerr))
	}
	committed := rerr == nil && r.Status == dedup.StatusCompleted && r.Owner == owner && r.Version == version
	return s.wrap(op, &TxEndedError{Index: ee.index, Committed: committed})
}

// inTx runs f in a transaction, committed only when f returns nil. Errors
// of the fence and of business writes pass as they are; the others are
// wrapped with op.
func (s *Store) inTx(ctx context.Context, op string, f func(tx pgx.Tx) error) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return s.wrap(op, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := f(tx); err != nil {
		if isDecision(err) {
			return err
		}
		return s.wrap(op, err)
	}
	return s.wrap(op, tx.Commit(ctx))
}

// writeError is the failure of a business write: the handler's, which
// the store returns as it is and never retries (a fault worth another try
// is retried with the message).
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// businessWrites applies writes in tx; a failure that is no decision is a
// *writeError.
func businessWrites(ctx context.Context, tx pgx.Tx, writes []dedup.Write) error {
	err := applyWrites(ctx, tx, writes)
	if err == nil || isDecision(err) {
		return err
	}
	return &writeError{err: err}
}

// writeAndSend applies writes and inserts msgs, the outgoing messages of
// the input whose key is key, in tx: in one round trip (a pipeline of
// their statements) where every write may be pipelined (pipelined),
// one statement after the other otherwise.
func (s *Store) writeAndSend(ctx context.Context, tx pgx.Tx, key string, writes []dedup.Write, msgs []outbox.Message, now time.Time) error {
	if len(msgs) == 0 || !pipelined(tx, writes) {
		if err := businessWrites(ctx, tx, writes); err != nil {
			return err
		}
		return s.outbox.insert(ctx, tx, key, msgs, now)
	}
	st, err := s.outbox.sql(ctx, tx)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	execs := make([]Exec, len(writes))
	for i, w := range writes {
		execs[i], _ = plainExec(w)
		b.Queue(execs[i].SQL, execs[i].Args...)
	}
	b.Queue(st.insertSQL, s.outbox.insertArgs(st, key, msgs, now)...)
	br := tx.SendBatch(ctx, b)
	// The first failure ends the pipeline: PostgreSQL skips the rest, and
	// the caller rolls back what ran.
	for i, e := range execs {
		tag, err := br.Exec()
		if err == nil && e.MustAffect && tag.RowsAffected() == 0 {
			err = fmt.Errorf("%w: the statement changed no row", ErrRejected)
		}
		if err != nil {
			_ = br.Close()
			if err = writeFailed(i, err); !isDecision(err) {
				err = &writeError{err: err}
			}
			return err
		}
	}
	_, err = br.Exec()
	return errors.Join(err, br.Close())
}

// pipelined reports whether writes may share one pipeline with the
// outbox's insert: each a plain Exec (plainExec) with arguments, sent by
// the extended protocol, which runs one statement each and none that
// ends the transaction (COMMIT takes no argument), so that nothing of
// the pipeline runs outside it.
func pipelined(tx pgx.Tx, writes []dedup.Write) bool {
	if tx.Conn().Config().DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol {
		return false
	}
	for _, w := range writes {
		if e, ok := plainExec(w); !ok || len(e.Args) == 0 {
			return false
		}
	}
	return true
}

// isDecision tells the errors a transaction decided (the fence, a
// business write's condition, a write ending the transaction) from the
// faults of its requests.
func isDecision(err error) bool {
	var be *dedup.BusinessConditionError
	var ee *endedError
	return errors.Is(err, dedup.ErrLeaseLost) || errors.As(err, &be) || errors.As(err, &ee)
}

// tx runs f in a transaction (inTx) under the instruments, retried whole
// when a request of it failed with a retryable fault (nothing of a failed
// transaction is stored). *st is set to the statements, and *retried
// when the last attempt was not the first. A decision is an answer, not a
// failed request, and a business write's failure the handler's: both are
// returned as they are, never retried.
func (s *Store) tx(ctx context.Context, op, instrOp string, st **statements, retried *bool, f func(ctx context.Context, tx pgx.Tx) error) error {
	var decided error
	err := s.instr.Do(ctx, instrOp, func(ctx context.Context, attempt int) error {
		*retried, decided = attempt > 1, nil
		var err error
		if *st, err = s.sql(ctx); err != nil {
			return s.wrap(op, err)
		}
		err = s.inTx(ctx, op, func(tx pgx.Tx) error { return f(ctx, tx) })
		var we *writeError
		if isDecision(err) || errors.As(err, &we) {
			decided = err
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return decided
}

// ClaimComplete implements dedup.Store: the claim's statements write
// COMPLETED, and with Writes they and the writes are one transaction.
func (s *Store) ClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	if req.Key == "" {
		return dedup.Claim{}, dedup.ErrEmptyKey
	}
	if err := dedup.CheckResponse(req.Response, s.maxResponse); err != nil {
		return dedup.Claim{}, err
	}
	writes, err := asWrites(req.Writes)
	if err != nil {
		return dedup.Claim{}, err
	}
	if err := checkOutbox(req.Outbox); err != nil {
		return dedup.Claim{}, err
	}
	if len(writes) == 0 && len(req.Outbox) == 0 {
		return s.claimAlone(ctx, "claim-complete", storeinstr.OpClaimComplete, req.Key, req.Owner, req.PayloadHash, dedup.StatusCompleted, req.Response, req.Now, req.ExpiresAt, req.SkewMargin)
	}
	var c dedup.Claim
	var st *statements
	retried := false
	err = s.tx(ctx, "claim-complete", storeinstr.OpClaimComplete, &st, &retried, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		c, err = s.claim(ctx, st, tx, req.Key, req.Owner, req.PayloadHash, dedup.StatusCompleted, req.Response, req.Now, req.ExpiresAt, req.SkewMargin)
		if err != nil || !c.Acquired {
			return err
		}
		return s.writeAndSend(ctx, tx, req.Key, writes, req.Outbox, req.Now)
	})
	if err != nil {
		if st == nil {
			return dedup.Claim{}, err
		}
		return dedup.Claim{}, s.ended(ctx, st, "claim-complete", err, req.Key, req.Owner, c.Lease.Version)
	}
	// The transaction is atomic: our own COMPLETED record means the writes
	// committed with it.
	return storeinstr.ClaimOnRetry(c, retried, req.Key, req.Owner, dedup.StatusCompleted), nil
}

// Fail implements dedup.Store. The reason is stored as
// dedup.StorableReason makes it: a text column refuses NUL and invalid
// UTF-8, and a refused Fail would count no attempt.
func (s *Store) Fail(ctx context.Context, req dedup.FailRequest) error {
	l := req.Lease
	done := dedup.StatusFailed
	if req.DeadLetter {
		done = dedup.StatusDeadLetter
	}
	return s.update(ctx, "fail", storeinstr.OpFail, l, done, func(st *statements) string { return st.failSQL },
		rowID(l.Key), l.Owner, l.Version, dedup.StorableReason(req.Reason), req.RetryAt, req.ResetAttempts, req.RefundAttempt, req.DeadLetter)
}

// Extend implements dedup.Store. A retry applies the same update again: it
// keeps the version, and a lease only moves forward.
func (s *Store) Extend(ctx context.Context, req dedup.ExtendRequest) error {
	l := req.Lease
	return s.update(ctx, "extend", storeinstr.OpExtend, l, "", func(st *statements) string { return st.extendSQL },
		rowID(l.Key), l.Owner, l.Version, req.LeaseUntil)
}

var _ dedup.Resetter = (*Store)(nil)

// Reset implements dedup.Resetter: one conditional UPDATE. A retried
// Reset whose first attempt committed unseen finds the record as it
// leaves it, and succeeds.
func (s *Store) Reset(ctx context.Context, req dedup.ResetRequest) error {
	reason := dedup.StorableReason(req.Reason)
	var tag pgconn.CommandTag
	var st *statements
	retried := false
	err := s.instr.Do(ctx, storeinstr.OpReset, func(ctx context.Context, attempt int) error {
		retried = attempt > 1
		var err error
		if st, err = s.sql(ctx); err != nil {
			return s.wrap("reset", err)
		}
		tag, err = s.db.Exec(ctx, st.resetSQL, rowID(req.Key), req.Version, reason, req.Now)
		return s.wrap("reset", err)
	})
	if err != nil || tag.RowsAffected() == 1 {
		return err
	}
	if retried {
		cur, err := s.read(ctx, st, s.db, req.Key)
		if err == nil && cur.Status == dedup.StatusFailed && cur.Version == req.Version+1 && cur.Attempts == 0 && cur.LastError == reason {
			return nil
		}
	}
	return fmt.Errorf("pgstore: reset: %w: key_hash %s version %d", dedup.ErrRecordChanged, dedup.KeyHash(req.Key), req.Version)
}
