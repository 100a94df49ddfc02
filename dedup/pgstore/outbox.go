package pgstore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/internal/outboxcodec"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/retry"
)

// The outbox table lies beside the records table, in its schema, named
// after it with outboxSuffix (see OutboxTable). CreateTable makes both.
const outboxSuffix = "_outbox"

// MaxOutboxPerCommit is the most outgoing messages one Complete or
// ClaimComplete commits; more are refused with a *dedup.TooManyWritesError
// before anything is written. Each commit takes a block of this many
// sequence numbers at once, so that its entries' Seq follow their order.
const MaxOutboxPerCommit = 1000

// seqBlock is the outbox sequence's increment: a commit's entries take
// base, base+1, ... within one nextval.
const seqBlock = 1024

// OutboxTable is the name of the outbox table beside the records table
// table (dedup.DefaultTable when ""): its last part followed by "_outbox",
// in the same schema. A last part too long for that keeps its first bytes
// and a hash of the whole, so that the name fits the 63 bytes PostgreSQL
// keeps and still differs from any other table's.
func OutboxTable(table string) string {
	if table == "" {
		table = dedup.DefaultTable
	}
	n := namesOf(table)
	return n.schema + n.outbox
}

// OutboxSequence is the name of the outbox table's sequence, which gives
// its entries' Seq, beside the records table table (dedup.DefaultTable
// when ""): the outbox table's name followed by "_seq", in the same
// schema. Where that passes PostgreSQL's 63 bytes it is the name
// PostgreSQL cuts it to, unless that names another of the table's
// relations (the outbox table itself): then the records table's last part,
// cut with a hash of the whole, followed by "_outbox_seq".
func OutboxSequence(table string) string {
	if table == "" {
		table = dedup.DefaultTable
	}
	n := namesOf(table)
	return n.schema + n.outboxSeq
}

// fitName is base+suffix, or when that passes maxIdentifier, base cut at
// a character boundary with a hash of base before the suffix.
func fitName(base, suffix string) string {
	if len(base)+len(suffix) <= maxIdentifier {
		return base + suffix
	}
	sum := sha256.Sum256([]byte(base))
	tag := "_" + hex.EncodeToString(sum[:4])
	cut := maxIdentifier - len(suffix) - len(tag)
	for cut > 0 && !utf8.RuneStart(base[cut]) {
		cut--
	}
	return base[:cut] + tag + suffix
}

// createOutboxSQL makes the outbox table of the records table table (its
// sequence and indexes too), as CreateTable runs it:
//
//	id           bytea PRIMARY KEY  -- the entry's ID, stored as a key is (see the package doc)
//	entry_id     bytea              -- the entry's ID as it is
//	destination  bytea
//	ordering_key bytea              -- empty: no order kept
//	seq          bigint             -- from the table's sequence, rising per lane
//	state        text               -- PENDING, DISPATCHED, DEAD
//	owner        text               -- the relay's lease
//	version      bigint             -- the fence, +1 per lease and per give-back
//	attempts     integer            -- failed sends (Retry)
//	releases     integer            -- give-backs unsent (Release)
//	last_error   text
//	body         bytea
//	headers      bytea              -- names and values, length-prefixed
//	created_at   timestamptz
//	expires_at   timestamptz        -- lease, retry or retention; NULL: never leased
func createOutboxSQL(table string) string {
	n := namesOf(table)
	q := quote(n.schema + n.outbox)
	return `CREATE TABLE IF NOT EXISTS ` + q + ` (
	id bytea PRIMARY KEY,
	entry_id bytea NOT NULL,
	destination bytea NOT NULL,
	ordering_key bytea NOT NULL,
	seq bigint NOT NULL,
	state text NOT NULL,
	owner text NOT NULL,
	version bigint NOT NULL,
	attempts integer NOT NULL,
	last_error text NOT NULL,
	body bytea NOT NULL,
	headers bytea NOT NULL,
	created_at timestamptz NOT NULL,
	expires_at timestamptz,
	releases integer NOT NULL DEFAULT 0
);
ALTER TABLE ` + q + ` ADD COLUMN IF NOT EXISTS releases integer NOT NULL DEFAULT 0;
CREATE SEQUENCE IF NOT EXISTS ` + quote(n.schema+n.outboxSeq) + ` INCREMENT BY ` + fmt.Sprint(seqBlock) + `;
CREATE INDEX IF NOT EXISTS ` + quote(n.outboxPendingIdx) + ` ON ` + q + ` (seq) WHERE state = 'PENDING';
CREATE INDEX IF NOT EXISTS ` + quote(n.outboxLaneIdx) + ` ON ` + q + ` (destination, ordering_key, seq) WHERE state = 'PENDING';
CREATE INDEX IF NOT EXISTS ` + quote(n.outboxExpiresIdx) + ` ON ` + q + ` (expires_at) WHERE state <> 'PENDING';
CREATE INDEX IF NOT EXISTS ` + quote(n.outboxUnorderedIdx) + ` ON ` + q + ` (seq) WHERE state = 'PENDING' AND ordering_key = ''::bytea`
}

// Outbox is the relay's view of the Store's outbox table (outbox.Store),
// which the Store's Capabilities hand over (and Store.Outbox returns).
// Complete and ClaimComplete insert the entries in the transaction that
// writes COMPLETED, and notify the table's channel on commit, which Wait listens to: at most one commit of a Store per 10 ms
// notifies (a notification queues the committers behind it), and Wait
// returns once more 20 ms after each notification, for the commits that
// relied on it.
//
// Lease keeps each lane's order (Destination and OrderingKey) among
// relays on several machines: in one statement it finds the first
// Pending entry of each lane (an entry with no OrderingKey is a lane of
// its own), visiting the lanes in turn from where the previous lease
// stopped, and locks those whose lease is free, FOR UPDATE SKIP LOCKED,
// so that a lane is leased by one relay at a time; then it locks the
// lane's next Pending entries that the lease may take, and leases its
// free ones up to the first that is not (held, or given back for a retry
// later). Commits to one ordered lane take a lock of the lane (an
// advisory lock, held to their commit), so that its Seq follows the
// order they commit in.
//
// PostgreSQL has no TTL: DeleteExpired removes Dispatched and Dead
// entries past their retention; run it from the relay or a job.
type Outbox struct {
	s *Store
	// stmts are the statements, made on first use with the table's name
	// qualified by the records table's schema.
	stmts atomic.Pointer[outboxStatements]
	// cursor is where the next Lease starts its round of the lanes.
	cursor atomic.Pointer[laneCursor]
	// notified is when (Unix nanoseconds) a commit last notified.
	notified atomic.Int64
	// listen is the connection Wait listens on (nil until its first call).
	mu     sync.Mutex
	listen *pgx.Conn
	// woke is when Wait last returned for a notification; lingered that
	// it has returned once more since (see Wait).
	woke     time.Time
	lingered bool
}

type outboxStatements struct {
	table, seq, channel                                                                                               string
	insertSQL, leaseSQL                                                                                               string
	dispatchedSQL, retrySQL, releaseSQL, readSQL, deadSQL, entriesSQL, entriesPageSQL, deleteSQL, checkSQL, listenSQL string
	requeueSQL, notifySQL                                                                                             string
}

var _ outbox.Store = (*Outbox)(nil)

// Outbox returns the relay's view of the Store's outbox (see type
// Outbox), the one its Capabilities hand over
// (dedup.Capabilities.Outbox): Complete and ClaimComplete commit
// outgoing messages with COMPLETED.
func (s *Store) Outbox() outbox.Store { return s.outbox }

// outboxSchemaSQL is the records table's schema ($1), or the outbox
// table's ($2) where the records table is not visible (a relay needs the
// outbox alone), or no row when neither is.
const outboxSchemaSQL = `SELECT n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE c.oid = coalesce(pg_catalog.to_regclass($1::text), pg_catalog.to_regclass($2::text))`

// sql returns the statements, finding the records table's schema on the
// first call that finds it, through q (a commit's own transaction: the
// pool may have no other connection to give).
func (o *Outbox) sql(ctx context.Context, q querier) (*outboxStatements, error) {
	if st := o.stmts.Load(); st != nil {
		return st, nil
	}
	var schema string
	err := q.QueryRow(ctx, outboxSchemaSQL, quote(o.s.table), quote(OutboxTable(o.s.table))).Scan(&schema)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, o.missing()
	}
	if err != nil {
		return nil, err
	}
	n := namesOf(o.s.table)
	o.stmts.CompareAndSwap(nil, newOutboxStatements(pgx.Identifier{schema, n.outbox}.Sanitize(), pgx.Identifier{schema, n.outboxSeq}.Sanitize()))
	return o.stmts.Load(), nil
}

// missing is the error of an outbox whose tables are not visible.
func (o *Outbox) missing() error {
	return catalogError("42P01", "the outbox table %s does not exist, nor its records table %s (or they are not on the search_path): "+
		"run pgstore.CreateTable, or onceq create-table -store postgres -table %s", OutboxTable(o.s.table), o.s.table, o.s.table)
}

const outboxCols = "entry_id, destination, ordering_key, seq, state, owner, version, attempts, last_error, body, headers, created_at, expires_at, releases"

// free is an entry whose lease has ended (or that was never leased) at
// the parameter's time.
func free(alias, param string) string {
	return "(" + alias + ".expires_at IS NULL OR " + alias + ".expires_at <= " + param + "::timestamptz)"
}

func newOutboxStatements(q, seq string) *outboxStatements {
	sum := sha256.Sum256([]byte(q))
	return &outboxStatements{
		table: q, seq: seq,
		// A channel of this table alone, short enough for any name.
		channel: "onceq_outbox_" + hex.EncodeToString(sum[:8]),
		// One statement: the ordered lanes' locks, taken in one order so
		// that two commits never wait on each other, before the block of
		// Seq is drawn (b reads l), so that a lane's Seq follows the order
		// its commits end in; then the entries, in their order. An entry
		// whose ID is stored (its key completed again after its record's
		// retention) is replaced, on a new version so that a lease of the
		// old one is fenced. The relays are notified only when $9 names
		// the channel (see Outbox.insert).
		insertSQL: `WITH l AS (SELECT count(pg_advisory_xact_lock(k)) AS n FROM (SELECT k FROM unnest($10::bigint[]) AS k ORDER BY k) AS s),
b AS (SELECT nextval($1::regclass) AS base FROM l),
ins AS (
	INSERT INTO ` + q + ` AS r (id, ` + outboxCols + `)
	SELECT u.id, u.entry_id, u.destination, u.ordering_key, b.base + u.ord - 1, 'PENDING', '', 0, 0, '', u.body, u.headers, $8::timestamptz, NULL, 0
	FROM b, unnest($2::bytea[], $3::bytea[], $4::bytea[], $5::bytea[], $6::bytea[], $7::bytea[])
		WITH ORDINALITY AS u(id, entry_id, destination, ordering_key, body, headers, ord)
	ON CONFLICT (id) DO UPDATE SET entry_id = EXCLUDED.entry_id, destination = EXCLUDED.destination,
		ordering_key = EXCLUDED.ordering_key, seq = EXCLUDED.seq, state = 'PENDING', owner = '', version = r.version + 1,
		attempts = 0, releases = 0, last_error = '', body = EXCLUDED.body, headers = EXCLUDED.headers, created_at = EXCLUDED.created_at, expires_at = NULL
)
SELECT pg_notify($9::text, '') WHERE $9::text <> ''`,
		// One statement, whose cost follows the entries it leases and the
		// lanes it passes, never the backlog behind them nor the dead
		// rows of entries already sent:
		//
		// walk and wrap visit the lanes (Destination, OrderingKey) in
		// index order from the cursor ($1, $2) round to it, one index
		// descent each, landing on each lane's first Pending entry, its
		// head (the unordered entries of a Destination are passed as one
		// lane, and taken by cand's second part, in Seq order); cand keeps
		// the free heads; heads locks them, SKIP LOCKED, so that a lane is
		// leased by one relay at a time. peek reads, unlocked, what each
		// lane may add behind its head, up to the first entry that is not
		// free, and reach bounds each lane at what the first $4 entries of
		// all take; lane locks those (waiting for a mark in flight), and
		// pick takes, from their fresh rows, each lane's free run up to $4
		// in Seq order.
		leaseSQL: `WITH RECURSIVE walk AS (
	(SELECT o.destination, o.ordering_key, o.id, o.expires_at FROM ` + q + ` o
		WHERE o.state = 'PENDING' AND (o.destination, o.ordering_key) >= ($1::bytea, $2::bytea)
		ORDER BY o.destination, o.ordering_key, o.seq LIMIT 1)
	UNION ALL
	SELECT n.* FROM walk w CROSS JOIN LATERAL (SELECT o.destination, o.ordering_key, o.id, o.expires_at FROM ` + q + ` o
		WHERE o.state = 'PENDING' AND (o.destination, o.ordering_key) > (w.destination, w.ordering_key)
		ORDER BY o.destination, o.ordering_key, o.seq LIMIT 1) n
), wrap AS (
	(SELECT o.destination, o.ordering_key, o.id, o.expires_at FROM ` + q + ` o
		WHERE o.state = 'PENDING' AND (o.destination, o.ordering_key) < ($1::bytea, $2::bytea)
		ORDER BY o.destination, o.ordering_key, o.seq LIMIT 1)
	UNION ALL
	SELECT n.* FROM wrap w CROSS JOIN LATERAL (SELECT o.destination, o.ordering_key, o.id, o.expires_at FROM ` + q + ` o
		WHERE o.state = 'PENDING' AND (o.destination, o.ordering_key) > (w.destination, w.ordering_key)
			AND (o.destination, o.ordering_key) < ($1::bytea, $2::bytea)
		ORDER BY o.destination, o.ordering_key, o.seq LIMIT 1) n
), cand AS (
	(SELECT l.id FROM (SELECT * FROM walk UNION ALL SELECT * FROM wrap) AS l
		WHERE l.ordering_key <> ''::bytea AND ` + free("l", "$3") + ` LIMIT $4)
	UNION ALL
	(SELECT u.id FROM ` + q + ` u WHERE u.state = 'PENDING' AND u.ordering_key = ''::bytea AND ` + free("u", "$3") + `
		ORDER BY u.seq LIMIT $4)
), heads AS (
	SELECT h.id, h.destination, h.ordering_key, h.seq FROM ` + q + ` h
	WHERE h.id IN (SELECT id FROM cand) AND h.state = 'PENDING' AND ` + free("h", "$3") + `
	ORDER BY h.seq LIMIT $4 FOR UPDATE OF h SKIP LOCKED
), peek AS (
	SELECT h.id AS lane, h.seq, true AS free FROM heads h
	UNION ALL
	SELECT h.id, f.seq, f.free FROM heads h CROSS JOIN LATERAL (SELECT o.seq, ` + free("o", "$3") + ` AS free FROM ` + q + ` o
		WHERE o.state = 'PENDING' AND o.destination = h.destination AND o.ordering_key = h.ordering_key AND o.seq > h.seq
		ORDER BY o.seq LIMIT $4) f
	WHERE h.ordering_key <> ''::bytea
), reach AS (
	SELECT lane, max(seq) AS upto FROM (SELECT lane, seq FROM (SELECT lane, seq, bool_and(free) OVER (PARTITION BY lane ORDER BY seq) AS free FROM peek) AS p
		WHERE free ORDER BY seq LIMIT $4) AS r GROUP BY lane
), lane AS (
	SELECT h.id AS lane, h.id, h.seq, true AS free FROM heads h
	UNION ALL
	SELECT h.id, f.id, f.seq, f.free FROM heads h JOIN reach ON reach.lane = h.id CROSS JOIN LATERAL (SELECT o.id, o.seq, ` + free("o", "$3") + ` AS free FROM ` + q + ` o
		WHERE o.state = 'PENDING' AND o.destination = h.destination AND o.ordering_key = h.ordering_key AND o.seq > h.seq AND o.seq <= reach.upto
		ORDER BY o.seq FOR UPDATE OF o) f
	WHERE h.ordering_key <> ''::bytea
), pick AS (
	SELECT id FROM (SELECT id, seq, bool_and(free) OVER (PARTITION BY lane ORDER BY seq) AS free FROM lane) AS run
	WHERE free ORDER BY seq LIMIT $4
)
UPDATE ` + q + ` AS r SET owner = $5, version = r.version + 1, expires_at = $6
	FROM pick WHERE r.id = pick.id
	RETURNING r.entry_id, r.destination, r.ordering_key, r.seq, r.state, r.owner, r.version, r.attempts, r.last_error,
		r.body, r.headers, r.created_at, r.expires_at, r.releases`,
		// A retried call ($5) whose first attempt committed unseen finds
		// its own mark, which it makes again.
		dispatchedSQL: `WITH m AS (UPDATE ` + q + ` AS r SET state = 'DISPATCHED', expires_at = $4
	FROM unnest($1::bytea[], $2::text[], $3::bigint[]) AS l(id, owner, version)
	WHERE r.id = l.id AND r.owner = l.owner AND r.version = l.version AND (r.state = 'PENDING' OR ($5::bool AND r.state = 'DISPATCHED'))
	RETURNING r.id)
SELECT coalesce(array_agg(id), '{}') FROM m`,
		retrySQL: `UPDATE ` + q + ` SET owner = '', version = version + 1, attempts = attempts + 1, last_error = $4, expires_at = $5
	WHERE id = $1 AND state = 'PENDING' AND owner = $2 AND version = $3`,
		releaseSQL: `UPDATE ` + q + ` SET owner = '', version = version + 1, releases = releases + 1, last_error = $4, expires_at = $5
	WHERE id = $1 AND state = 'PENDING' AND owner = $2 AND version = $3`,
		readSQL: `SELECT state, owner, version FROM ` + q + ` WHERE id = $1`,
		deadSQL: `UPDATE ` + q + ` SET state = 'DEAD', last_error = $4, expires_at = $5
	WHERE id = $1 AND owner = $2 AND version = $3 AND (state = 'PENDING' OR ($6::bool AND state = 'DEAD'))`,
		// A retried call ($5) whose first attempt committed unseen finds
		// the entry as it leaves it, and writes it again.
		requeueSQL: `UPDATE ` + q + ` SET state = 'PENDING', owner = '', version = $2::bigint + 1, attempts = 0, releases = 0, last_error = $3, expires_at = $4
	WHERE id = $1 AND ((state = 'DEAD' AND version = $2) OR ($5::bool AND state = 'PENDING' AND owner = '' AND version = $2::bigint + 1 AND last_error = $3))`,
		notifySQL:  `SELECT pg_notify($1, '')`,
		entriesSQL: `SELECT ` + outboxCols + ` FROM ` + q + ` WHERE ($1::text = '' OR state = $1::text) ORDER BY seq LIMIT $2`,
		// seq comes from one sequence, so it orders the whole table.
		entriesPageSQL: `SELECT ` + outboxCols + ` FROM ` + q + ` WHERE ($1::text = '' OR state = $1::text) AND seq > $2 ORDER BY seq LIMIT $3`,
		deleteSQL: `DELETE FROM ` + q + ` WHERE id IN (SELECT id FROM ` + q + `
	WHERE state <> 'PENDING' AND expires_at < $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		checkSQL: `SELECT has_table_privilege($1::text, 'SELECT') AND has_table_privilege($1::text, 'INSERT')
	AND has_table_privilege($1::text, 'UPDATE') AND has_sequence_privilege($2::text, 'USAGE'), (SELECT count(*) FROM (SELECT id, ` + outboxCols + ` FROM ` + q + ` WHERE false) AS layout)`,
		listenSQL: `LISTEN ` + pgx.Identifier{"onceq_outbox_" + hex.EncodeToString(sum[:8])}.Sanitize(),
	}
}

// wrap is the Store's wrap, naming the outbox table.
func (o *Outbox) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Table: OutboxTable(o.s.table), Err: err, class: classOf(err)}
}

// laneLock is the advisory lock of an ordered lane of table q.
func laneLock(q string, m outbox.Message) int64 {
	h := sha256.New()
	for _, p := range []string{q, m.Destination, m.OrderingKey} {
		_ = binary.Write(h, binary.BigEndian, uint64(len(p)))
		h.Write([]byte(p))
	}
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

// checkOutbox refuses more messages than one commit takes.
func checkOutbox(msgs []outbox.Message) error {
	if len(msgs) > MaxOutboxPerCommit {
		return &dedup.TooManyWritesError{Got: len(msgs), Max: MaxOutboxPerCommit}
	}
	return nil
}

// notifyEvery is the least time between two commits of one Store that
// notify the relays. A notification takes PostgreSQL's notification
// queue lock to the end of its commit, which would queue every committer
// behind the others; within notifyEvery of the last, a commit relies on
// that one's wake-up: the relay it woke passes again while it finds
// entries, and a relay that found none polls (outbox.PollInterval), which
// bounds the wait of a commit no pass saw.
const notifyEvery = 10 * time.Millisecond

// insert writes msgs as the Pending entries of the input whose key is
// key, in tx, committed at now, in one statement (insertArgs).
func (o *Outbox) insert(ctx context.Context, tx pgx.Tx, key string, msgs []outbox.Message, now time.Time) error {
	if len(msgs) == 0 {
		return nil
	}
	st, err := o.sql(ctx, tx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, st.insertSQL, o.insertArgs(st, key, msgs, now)...)
	return err
}

// insertArgs are insertSQL's arguments for msgs, the outgoing messages
// of the input whose key is key: the channel to notify when no commit of
// this Store notified in the last notifyEvery.
func (o *Outbox) insertArgs(st *outboxStatements, key string, msgs []outbox.Message, now time.Time) []any {
	var locks []int64
	for _, m := range msgs {
		if m.OrderingKey != "" {
			locks = append(locks, laneLock(st.table, m))
		}
	}
	slices.Sort(locks)
	locks = slices.Compact(locks)
	if locks == nil {
		locks = []int64{}
	}
	n := len(msgs)
	ids, entryIDs, dests, keys, bodies, headers := make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n)
	for i, m := range msgs {
		id := outbox.ID(key, i)
		ids[i], entryIDs[i], dests[i], keys[i] = rowID(id), []byte(id), []byte(m.Destination), []byte(m.OrderingKey)
		bodies[i], headers[i] = m.Body, outboxcodec.Encode(m.Headers)
		if bodies[i] == nil {
			bodies[i] = []byte{}
		}
	}
	channel := ""
	at := time.Now().UnixNano()
	if last := o.notified.Load(); at-last >= int64(notifyEvery) && o.notified.CompareAndSwap(last, at) {
		channel = st.channel
	}
	return []any{st.seq, ids, entryIDs, dests, keys, bodies, headers, now, channel, locks}
}

// scanEntry reads a row of outboxCols.
func scanEntry(row pgx.Row) (outbox.Entry, error) {
	var (
		e                    outbox.Entry
		id, dest, okey, hdrs []byte
		state                string
		expires              *time.Time
	)
	err := row.Scan(&id, &dest, &okey, &e.Seq, &state, &e.Lease.Owner, &e.Lease.Version, &e.Attempts, &e.LastError, &e.Body, &hdrs, &e.CreatedAt, &expires, &e.Releases)
	if err != nil {
		return outbox.Entry{}, err
	}
	e.ID, e.Destination, e.OrderingKey, e.State = string(id), string(dest), string(okey), outbox.State(state)
	e.Lease.ID = e.ID
	if expires != nil {
		e.ExpiresAt = *expires
	}
	if e.Headers, err = outboxcodec.Decode(hdrs); err != nil {
		return outbox.Entry{}, fmt.Errorf("pgstore: outbox entry %s: %w", dedup.KeyHash(e.ID), err)
	}
	switch e.State {
	case outbox.Pending, outbox.Dispatched, outbox.Dead:
	default:
		return outbox.Entry{}, fmt.Errorf("pgstore: outbox entry %s: state %q", dedup.KeyHash(e.ID), state)
	}
	return e, nil
}

// Lease implements outbox.Store (see type Outbox for how lanes are kept).
func (o *Outbox) Lease(ctx context.Context, req outbox.LeaseRequest) ([]outbox.Entry, error) {
	if req.Max <= 0 {
		return nil, nil
	}
	var out []outbox.Entry
	from := o.cursor.Load()
	if from == nil {
		from = &laneCursor{dest: []byte{}, key: []byte{}}
	}
	err := o.s.instr.Do(ctx, storeinstr.OpOutboxLease, func(ctx context.Context, _ int) error {
		out = out[:0]
		st, err := o.sql(ctx, o.s.db)
		if err != nil {
			return o.wrap("outbox-lease", err)
		}
		lease := func(q rowsQuerier) error {
			rows, err := q.Query(ctx, st.leaseSQL, from.dest, from.key, req.Now, req.Max, req.Owner, req.LeaseUntil)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				e, err := scanEntry(rows)
				if err != nil {
					return err
				}
				out = append(out, e)
			}
			return rows.Err()
		}
		// One statement, one round trip where the DB runs a Query (a
		// pool, a connection); a transaction for it otherwise.
		if q, ok := o.s.db.(rowsQuerier); ok {
			return o.wrap("outbox-lease", lease(q))
		}
		return o.inTx(ctx, "outbox-lease", func(tx pgx.Tx) error { return lease(tx) })
	})
	if err != nil {
		return nil, err
	}
	// Each lane's entries in Seq order, as Lease promises.
	slices.SortFunc(out, func(a, b outbox.Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	o.cursor.Store(nextCursor(out))
	return out, nil
}

// laneCursor is where the next lease starts its round of the lanes: just
// after the last ordered lane the previous one took, so that lanes past
// the first batch's worth are served in turn.
type laneCursor struct{ dest, key []byte }

// nextCursor follows the greatest ordered lane of entries (the start
// when there is none): its key with a zero byte after it is the least
// that sorts after it.
func nextCursor(entries []outbox.Entry) *laneCursor {
	var c *laneCursor
	for i := range entries {
		e := &entries[i]
		if e.OrderingKey == "" {
			continue
		}
		if c == nil || cmp.Or(strings.Compare(e.Destination, string(c.dest)), strings.Compare(e.OrderingKey, string(c.key))) > 0 {
			c = &laneCursor{dest: []byte(e.Destination), key: []byte(e.OrderingKey)}
		}
	}
	if c == nil {
		return &laneCursor{dest: []byte{}, key: []byte{}}
	}
	c.key = append(c.key, 0)
	return c
}

// rowsQuerier runs a query of many rows (a pool, a connection, a
// transaction).
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// inTx runs f in a transaction, committed when f returns nil.
func (o *Outbox) inTx(ctx context.Context, op string, f func(tx pgx.Tx) error) error {
	tx, err := o.s.db.Begin(ctx)
	if err != nil {
		return o.wrap(op, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := f(tx); err != nil {
		return o.wrap(op, err)
	}
	return o.wrap(op, tx.Commit(ctx))
}

// lost is the error of a mark whose lease is no longer held.
func lost(op string, l outbox.Lease) error {
	return fmt.Errorf("pgstore: %s: %w: entry %s version %d", op, outbox.ErrLeaseLost, dedup.KeyHash(l.ID), l.Version)
}

// Dispatched implements outbox.Store. A call retried after a lost
// connection recognises the marks its first attempt committed unseen.
func (o *Outbox) Dispatched(ctx context.Context, leases []outbox.Lease, _, retainUntil time.Time) error {
	if len(leases) == 0 {
		return nil
	}
	rows, owners, versions := make([][]byte, len(leases)), make([]string, len(leases)), make([]int64, len(leases))
	for i, l := range leases {
		rows[i], owners[i], versions[i] = rowID(l.ID), l.Owner, l.Version
	}
	var marked [][]byte
	err := o.s.instr.Do(ctx, storeinstr.OpOutboxDispatched, func(ctx context.Context, attempt int) error {
		st, err := o.sql(ctx, o.s.db)
		if err != nil {
			return o.wrap("outbox-dispatched", err)
		}
		return o.wrap("outbox-dispatched", o.s.db.QueryRow(ctx, st.dispatchedSQL, rows, owners, versions, retainUntil, attempt > 1).Scan(&marked))
	})
	if err != nil {
		return err
	}
	var errs []error
	for i, l := range leases {
		if !slices.ContainsFunc(marked, func(id []byte) bool { return string(id) == string(rows[i]) }) {
			errs = append(errs, lost("outbox-dispatched", l))
		}
	}
	return errors.Join(errs...)
}

// Retry implements outbox.Store: the entry is leased again from retryAt,
// on a new version, so that the lease given back fences nothing.
func (o *Outbox) Retry(ctx context.Context, l outbox.Lease, reason string, _, retryAt time.Time) error {
	return o.giveBack(ctx, "outbox-retry", storeinstr.OpOutboxRetry, l, reason, retryAt, func(st *outboxStatements) string { return st.retrySQL })
}

// Release implements outbox.Store as Retry does, counting a release
// rather than an attempt.
func (o *Outbox) Release(ctx context.Context, l outbox.Lease, reason string, _, retryAt time.Time) error {
	return o.giveBack(ctx, "outbox-release", storeinstr.OpOutboxRelease, l, reason, retryAt, func(st *outboxStatements) string { return st.releaseSQL })
}

// giveBack runs Retry's or Release's fenced UPDATE. A call retried after
// a lost connection recognises the give-back its first attempt committed
// unseen.
func (o *Outbox) giveBack(ctx context.Context, op, instrOp string, l outbox.Lease, reason string, retryAt time.Time, sql func(*outboxStatements) string) error {
	n, retried, err := o.mark(ctx, op, instrOp, func(st *outboxStatements, _ bool) (string, []any) {
		return sql(st), []any{rowID(l.ID), l.Owner, l.Version, dedup.StorableReason(reason), retryAt}
	})
	if err != nil || n == 1 {
		return err
	}
	if retried {
		// The first attempt may have committed unseen: the entry given
		// back, one version on, with no owner.
		var state, owner string
		var version int64
		rerr := o.s.instr.Do(ctx, instrOp, func(ctx context.Context, _ int) error {
			st, err := o.sql(ctx, o.s.db)
			if err != nil {
				return o.wrap(op, err)
			}
			err = o.s.db.QueryRow(ctx, st.readSQL, rowID(l.ID)).Scan(&state, &owner, &version)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return o.wrap(op, err)
		})
		if rerr != nil {
			return fmt.Errorf("pgstore: %s: a retry lost the fence and the entry could not be read: %w", op, rerr)
		}
		if state == string(outbox.Pending) && owner == "" && version == l.Version+1 {
			return nil
		}
	}
	return lost(op, l)
}

// Dead implements outbox.Store.
func (o *Outbox) Dead(ctx context.Context, l outbox.Lease, reason string, _, retainUntil time.Time) error {
	n, _, err := o.mark(ctx, "outbox-dead", storeinstr.OpOutboxDead, func(st *outboxStatements, retried bool) (string, []any) {
		return st.deadSQL, []any{rowID(l.ID), l.Owner, l.Version, dedup.StorableReason(reason), retainUntil, retried}
	})
	if err != nil || n == 1 {
		return err
	}
	return lost("outbox-dead", l)
}

// mark runs one fenced UPDATE under the instruments and returns the rows
// it changed and whether its last attempt was a retry.
func (o *Outbox) mark(ctx context.Context, op, instrOp string, stmt func(st *outboxStatements, retried bool) (string, []any)) (int64, bool, error) {
	var n int64
	retried := false
	err := o.s.instr.Do(ctx, instrOp, func(ctx context.Context, attempt int) error {
		retried = attempt > 1
		st, err := o.sql(ctx, o.s.db)
		if err != nil {
			return o.wrap(op, err)
		}
		sql, args := stmt(st, retried)
		tag, err := o.s.db.Exec(ctx, sql, args...)
		n = tag.RowsAffected()
		return o.wrap(op, err)
	})
	return n, retried, err
}

// Entries implements outbox.Store, in Seq order; limit <= 0 lists all.
func (o *Outbox) Entries(ctx context.Context, state outbox.State, limit int) ([]outbox.Entry, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	return o.list(ctx, func(st *outboxStatements) string { return st.entriesSQL }, string(state), lim)
}

// list runs the listing query that sql picks with args.
func (o *Outbox) list(ctx context.Context, sql func(*outboxStatements) string, args ...any) ([]outbox.Entry, error) {
	var out []outbox.Entry
	err := o.s.instr.Do(ctx, storeinstr.OpOutboxEntries, func(ctx context.Context, _ int) error {
		st, err := o.sql(ctx, o.s.db)
		if err != nil {
			return o.wrap("outbox-entries", err)
		}
		// A transaction for its Query, which DB does not have.
		return o.inTx(ctx, "outbox-entries", func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, sql(st), args...)
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (outbox.Entry, error) { return scanEntry(r) })
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// entriesPage is EntriesPage's page when its limit is not set.
const entriesPage = 1000

// EntriesPage implements outbox.Pager: at most limit entries in state
// (1000 when limit <= 0), in Seq order, from the one after the cursor's.
func (o *Outbox) EntriesPage(ctx context.Context, state outbox.State, cursor string, limit int) ([]outbox.Entry, string, error) {
	var after int64
	if cursor != "" {
		// A page's cursor is an entry's seq, drawn from a sequence
		// that starts at 1.
		n, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || n <= 0 {
			return nil, "", o.wrap("outbox-entries", outbox.ErrBadCursor)
		}
		after = n
	}
	if limit <= 0 {
		limit = entriesPage
	}
	out, err := o.list(ctx, func(st *outboxStatements) string { return st.entriesPageSQL }, string(state), after, limit)
	if err != nil || len(out) < limit {
		return out, "", err
	}
	return out, strconv.FormatInt(out[len(out)-1].Seq, 10), nil
}

// DeleteExpired deletes at most limit Dispatched or Dead entries whose
// retention ended before before, oldest first, and returns how many.
// Rows another transaction holds are skipped.
func (o *Outbox) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	st, err := o.sql(ctx, o.s.db)
	if err != nil {
		return 0, o.wrap("outbox-cleanup", err)
	}
	tag, err := o.s.db.Exec(ctx, st.deleteSQL, before, limit)
	if err != nil {
		return 0, o.wrap("outbox-cleanup", err)
	}
	return int(tag.RowsAffected()), nil
}

// Check verifies that the outbox table exists with the entry's columns,
// and its sequence, and that this role may read, insert and update it and
// take numbers from the sequence. A records table made before the outbox
// existed has none: CreateTable adds it.
func (o *Outbox) Check(ctx context.Context) error {
	var ok bool
	err := o.s.instr.Do(ctx, storeinstr.OpCheck, func(ctx context.Context, _ int) error {
		st, err := o.sql(ctx, o.s.db)
		if err != nil {
			return o.wrap("check", err)
		}
		var n int64
		err = o.s.db.QueryRow(ctx, st.checkSQL, st.table, st.seq).Scan(&ok, &n)
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == "42703" && strings.Contains(pe.Message, `"releases"`):
			err = fmt.Errorf("%w: the outbox table was made by an earlier onceq; run pgstore.CreateTable (or onceq create-table -store postgres) on it, "+
				"or ALTER TABLE %s ADD COLUMN releases integer NOT NULL DEFAULT 0", err, st.table)
		case err != nil && classOf(err) == retry.Misconfigured:
			err = fmt.Errorf("%w (run pgstore.CreateTable, or onceq create-table -store postgres, to add the outbox table)", err)
		}
		return o.wrap("check", err)
	})
	if err != nil {
		return err
	}
	if !ok {
		return o.wrap("check", errors.New("the role lacks SELECT, INSERT or UPDATE on the outbox table, or USAGE on its sequence"))
	}
	return nil
}

// ErrNoListen: Wait needs a *pgxpool.Pool (a connection of its own to
// listen on), and the Store was given another DB.
var ErrNoListen = errors.New("pgstore: the Store's DB gives no connection to listen on (want a *pgxpool.Pool)")

// Wait blocks until an outbox entry may have been committed: a commit's
// notification on the table's channel, or ctx's end (its error). The
// first call only begins to listen, on a connection taken from the pool
// for the Outbox's own use, and returns at once, so that a relay which
// leases after each return misses no commit; later calls wait. A relay
// bounds each wait with a context (a poll interval): a notification is
// a hint, and entries given back for a retry later wake no one. One
// goroutine waits at a time. Close gives the connection back.
//
// The call after one that returned for a notification returns again
// 2×10 ms after it: a commit within 10 ms of a notifying one sends none
// (see type Outbox), and may have landed after the pass that
// notification woke had leased.
func (o *Outbox) Wait(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.listen != nil && o.listen.IsClosed() {
		o.listen = nil
	}
	if o.listen == nil {
		return o.startListening(ctx)
	}
	if !o.woke.IsZero() && !o.lingered {
		o.lingered = true
		t := time.NewTimer(time.Until(o.woke.Add(2 * notifyEvery)))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	_, err := o.listen.WaitForNotification(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		o.woke, o.lingered = time.Now(), false
	}
	return o.wrap("outbox-wait", err)
}

// startListening takes a connection of its own and listens on it.
func (o *Outbox) startListening(ctx context.Context) error {
	p, ok := o.s.db.(*pgxpool.Pool)
	if !ok {
		return ErrNoListen
	}
	st, err := o.sql(ctx, o.s.db)
	if err != nil {
		return o.wrap("outbox-wait", err)
	}
	c, err := p.Acquire(ctx)
	if err != nil {
		return o.wrap("outbox-wait", err)
	}
	conn := c.Hijack()
	if _, err := conn.Exec(ctx, st.listenSQL); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return o.wrap("outbox-wait", err)
	}
	o.listen = conn
	return nil
}

// Close ends Wait's listening and closes its connection; a later Wait
// listens again. It waits for a Wait in progress to return.
func (o *Outbox) Close(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.listen == nil {
		return nil
	}
	err := o.listen.Close(ctx)
	o.listen = nil
	return err
}

var _ outbox.Requeuer = (*Outbox)(nil)

// Requeue implements outbox.Requeuer, and wakes the relays listening.
func (o *Outbox) Requeue(ctx context.Context, e outbox.Entry, reason string, now time.Time) error {
	l := e.Lease
	n, _, err := o.mark(ctx, "outbox-requeue", storeinstr.OpOutboxRequeue, func(st *outboxStatements, retried bool) (string, []any) {
		return st.requeueSQL, []any{rowID(e.ID), l.Version, dedup.StorableReason(reason), now, retried}
	})
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("pgstore: outbox-requeue: %w: entry %s version %d", outbox.ErrEntryChanged, dedup.KeyHash(l.ID), l.Version)
	}
	// Best effort: a relay not woken finds it on its next poll.
	if st, err := o.sql(ctx, o.s.db); err == nil {
		_, _ = o.s.db.Exec(ctx, st.notifySQL, st.channel)
	}
	return nil
}
