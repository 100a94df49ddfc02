package pgstore

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storeinstr"
)

// offsetsSuffix ends the offsets table's name.
const offsetsSuffix = "_offsets"

// OffsetsTable is the name of the offsets table of batch mode beside the
// records table named table (dedup.DefaultTable when ""): in its schema,
// its last part followed by "_offsets" ("app.onceq_records" gives
// "app.onceq_records_offsets"). A last part too long for that is cut, at
// a character's start, to what fits PostgreSQL's 63 bytes.
func OffsetsTable(table string) string {
	if table == "" {
		table = dedup.DefaultTable
	}
	last := lastPart(table)
	return table[:len(table)-len(last)] + offsetsName(last)
}

// offsetsName is the offsets table's last part for the records table's
// last part.
func offsetsName(last string) string {
	if n := maxIdentifier - len(offsetsSuffix); len(last) > n {
		for n > 0 && !utf8.RuneStart(last[n]) {
			n--
		}
		last = last[:n]
	}
	return last + offsetsSuffix
}

// createOffsetsTable creates the offsets table of the records table
// table when it does not exist:
//
//	group_id, topic, partition  -- the partition, the primary key
//	token        bigint         -- the fence, raised by every Acquire
//	next_offset  bigint         -- -1 until the first commit
//	member       text           -- the member that last acquired it
func createOffsetsTable(ctx context.Context, db DB, table string) error {
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+quote(OffsetsTable(table))+` (
	group_id text NOT NULL,
	topic text NOT NULL,
	partition integer NOT NULL,
	token bigint NOT NULL,
	next_offset bigint NOT NULL,
	member text NOT NULL,
	PRIMARY KEY (group_id, topic, partition)
)`)
	return err
}

// batchStatements are the batch view's SQL, for the schema-qualified
// offsets and records tables.
type batchStatements struct {
	acquireSQL, commitSQL, offsetSQL, keysSQL string
}

// batchSQL returns the batch view's statements, finding the offsets
// table's schema on the first call that finds it, as sql does the
// records table's.
func (s *Store) batchSQL(ctx context.Context) (*batchStatements, error) {
	if bs := s.batchStmts.Load(); bs != nil {
		return bs, nil
	}
	st, err := s.sql(ctx)
	if err != nil {
		return nil, err
	}
	var o string
	err = s.db.QueryRow(ctx, resolveSQL, quote(OffsetsTable(s.table))).Scan(&o)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, s.missingOffsets()
	}
	if err != nil {
		return nil, err
	}
	s.batchStmts.CompareAndSwap(nil, newBatchStatements(o, st.records))
	return s.batchStmts.Load(), nil
}

// missingOffsets is the error of an offsets table that is not visible.
func (s *Store) missingOffsets() error {
	return catalogError("42P01", "the offsets table %s does not exist (or is not on the search_path): "+
		"run pgstore.CreateTable, or onceq create-table -store postgres -table %s", OffsetsTable(s.table), s.table)
}

// newBatchStatements makes the statements for o and r, the quoted,
// qualified offsets and records tables.
func newBatchStatements(o, r string) *batchStatements {
	const where = `WHERE group_id = $1 AND topic = $2 AND partition = $3`
	return &batchStatements{
		acquireSQL: `INSERT INTO ` + o + ` AS o (group_id, topic, partition, token, next_offset, member)
	VALUES ($1, $2, $3, 1, -1, $4)
	ON CONFLICT (group_id, topic, partition) DO UPDATE SET token = o.token + 1, member = EXCLUDED.member
	RETURNING token, next_offset`,
		// The fence: the row moves only under the lease's token, from the
		// batch's first offset (or from none yet).
		commitSQL: `UPDATE ` + o + ` SET next_offset = $6 ` + where + ` AND token = $4 AND (next_offset = -1 OR next_offset = $5)`,
		offsetSQL: `SELECT token, next_offset, member FROM ` + o + ` ` + where,
		// The keys as a claim writes COMPLETED, all in one statement, with
		// the claim's parameters ($1 the rows' ids and $4 their payload
		// hashes, arrays of one length; $8 = $6: no skew margin, a batch
		// takes only what has expired); the ids returned are the keys
		// claimed, those missing are live.
		keysSQL: `INSERT INTO ` + r + ` AS r (id, ` + recordCols + `)
	SELECT k.id, $2::text, 1, $3::text, k.hash, $5::bytea, 0, '', $6::timestamptz, $7::timestamptz, 0
	FROM unnest($1::bytea[], $4::text[]) AS k(id, hash)
	` + takeover + `
	RETURNING r.id`,
	}
}

// Offsets returns the Store's batch view, which its Capabilities hand over
// (dedup.Capabilities.Offsets; batch.Store): the offset rows
// of Kafka partitions, in the offsets table beside the records table
// (OffsetsTable, made by CreateTable), committed in one transaction with
// the batch's Exec and Func writes and its Keys as COMPLETED records of
// the records table.
func (s *Store) Offsets() dedup.Offsets { return (*batchView)(s) }

// batchView is the Store seen as a dedup.Offsets.
type batchView Store

// Acquire implements dedup.Offsets: one statement. Retried after a lost
// connection, it may raise the token twice: the lease returned holds the
// last.
func (b *batchView) Acquire(ctx context.Context, p dedup.Partition, member string) (dedup.OffsetLease, error) {
	s := (*Store)(b)
	l := dedup.OffsetLease{Partition: p, Member: member}
	err := s.instr.Do(ctx, storeinstr.OpBatchAcquire, func(ctx context.Context, _ int) error {
		bs, err := s.batchSQL(ctx)
		if err != nil {
			return s.wrap("batch-acquire", err)
		}
		return s.wrap("batch-acquire", s.db.QueryRow(ctx, bs.acquireSQL, p.Group, p.Topic, p.Partition, member).Scan(&l.Token, &l.Next))
	})
	if err != nil {
		return dedup.OffsetLease{}, err
	}
	return l, nil
}

// Offset implements dedup.Offsets.
func (b *batchView) Offset(ctx context.Context, p dedup.Partition) (dedup.OffsetLease, error) {
	s := (*Store)(b)
	var (
		l        dedup.OffsetLease
		notFound error
	)
	err := s.instr.Do(ctx, storeinstr.OpBatchOffset, func(ctx context.Context, _ int) error {
		bs, err := s.batchSQL(ctx)
		if err != nil {
			return s.wrap("batch-offset", err)
		}
		l, notFound, err = s.readOffset(ctx, bs, p)
		return s.wrap("batch-offset", err)
	})
	if err != nil {
		return dedup.OffsetLease{}, err
	}
	return l, notFound
}

// readOffset reads p's row; notFound (an answer, not a failure) when it
// has none.
func (s *Store) readOffset(ctx context.Context, bs *batchStatements, p dedup.Partition) (l dedup.OffsetLease, notFound, err error) {
	l.Partition = p
	err = s.db.QueryRow(ctx, bs.offsetSQL, p.Group, p.Topic, p.Partition).Scan(&l.Token, &l.Next, &l.Member)
	if errors.Is(err, pgx.ErrNoRows) {
		return dedup.OffsetLease{}, fmt.Errorf("%w: %s", dedup.ErrNoOffset, p), nil
	}
	return l, nil, err
}

// errOffsetRefused: the offset row's condition did not hold; the row,
// read afresh, says whether the lease was fenced or From was wrong.
var errOffsetRefused = errors.New("pgstore: the offset row's condition failed")

// batchSender is a DB that sends a pgx.Batch, beginning its transaction
// in the same round trip (*pgxpool.Pool, *pgx.Conn).
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Commit implements dedup.Offsets: one transaction, its first round trip
// BEGIN, the offset row's fenced UPDATE and the keys' one INSERT, then
// the business writes in order (each run of plain Execs in one round
// trip, see batchWrites), then COMMIT. The
// whole transaction is retried on a transient fault; a commit retried
// after a lost connection that finds the row where it moves it (its
// token, Next) reports success, its first attempt having committed.
//
// A write that ends the transaction itself returns a *TxEndedError whose
// Committed says whether the offset row moved (and with it the keys and
// the writes before it); Execs sent with it in one round trip after it
// ran outside the transaction.
func (b *batchView) Commit(ctx context.Context, c dedup.OffsetCommit) error {
	if err := c.Check(); err != nil {
		return err
	}
	writes, err := asWrites(c.Writes)
	if err != nil {
		return err
	}
	s := (*Store)(b)
	ids := make([][]byte, len(c.Keys))
	for i, k := range c.Keys {
		ids[i] = rowID(k)
	}
	var decided error
	err = s.instr.Do(ctx, storeinstr.OpBatchCommit, func(ctx context.Context, attempt int) error {
		decided = nil
		bs, err := s.batchSQL(ctx)
		if err != nil {
			return s.wrap("batch-commit", err)
		}
		err = s.commitBatch(ctx, bs, c, ids, writes)
		if errors.Is(err, errOffsetRefused) {
			err = s.offsetRefused(ctx, bs, c, attempt > 1)
		}
		var (
			we *writeError
			de *dedup.DuplicateKeysError
			ee *endedError
		)
		switch {
		case errors.As(err, &ee):
			decided = s.batchEnded(ctx, bs, c, ee)
		case isDecision(err), errors.As(err, &we), errors.As(err, &de),
			errors.Is(err, dedup.ErrFenced), errors.Is(err, dedup.ErrOffsetMismatch):
			decided = err
		default:
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return decided
}

// commitBatch is one attempt of Commit's transaction.
func (s *Store) commitBatch(ctx context.Context, bs *batchStatements, c dedup.OffsetCommit, ids [][]byte, writes []dedup.Write) error {
	p := c.Lease.Partition
	var (
		q      pgx.Batch
		tx     pgx.Tx
		br     pgx.BatchResults
		err    error
		sender batchSender
	)
	sender, direct := s.db.(batchSender)
	if direct {
		q.BeginTx(pgx.TxOptions{})
	} else if tx, err = s.db.Begin(ctx); err != nil {
		return s.wrap("batch-commit", err)
	}
	q.Queue(bs.commitSQL, p.Group, p.Topic, p.Partition, c.Lease.Token, c.From, c.Next)
	if len(ids) > 0 {
		hashes := c.PayloadHashes
		if len(hashes) == 0 {
			hashes = make([]string, len(ids))
		}
		q.Queue(bs.keysSQL, ids, string(dedup.StatusCompleted), c.Lease.Member, hashes, []byte(nil), c.Now, c.ExpiresAt, c.Now)
	}
	if direct {
		br = sender.SendBatch(ctx, &q)
		tx = br.Tx()
	} else {
		br = tx.SendBatch(ctx, &q)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	moved, claimed, err := readFence(br, direct, len(ids) > 0)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return s.wrap("batch-commit", err)
	}
	if !moved {
		return errOffsetRefused
	}
	if len(claimed) < len(ids) {
		var dup []int
		for i, id := range ids {
			if _, ok := claimed[string(id)]; !ok {
				dup = append(dup, i)
			}
		}
		return &dedup.DuplicateKeysError{Indexes: dup}
	}
	if err := batchWrites(ctx, tx, writes); err != nil {
		return err
	}
	return s.wrap("batch-commit", tx.Commit(ctx))
}

// readFence reads the first round trip's results: whether the offset row
// moved, and the ids of the keys claimed.
func readFence(br pgx.BatchResults, begun, keys bool) (moved bool, claimed map[string]struct{}, err error) {
	if begun {
		if _, err := br.Exec(); err != nil {
			return false, nil, err
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return false, nil, err
	}
	if !keys {
		return tag.RowsAffected() == 1, nil, nil
	}
	rows, err := br.Query()
	if err != nil {
		return false, nil, err
	}
	claimed = map[string]struct{}{}
	var id []byte
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		claimed[string(id)] = struct{}{}
		return nil
	})
	return tag.RowsAffected() == 1, claimed, err
}

// offsetRefused reads the row whose condition failed: ErrFenced when its
// token is not the lease's (or it is gone), ErrOffsetMismatch when its
// next offset is not From, nil when a retried commit finds the row where
// it moves it (its first attempt committed unseen).
func (s *Store) offsetRefused(ctx context.Context, bs *batchStatements, c dedup.OffsetCommit, retried bool) error {
	p := c.Lease.Partition
	row, notFound, err := s.readOffset(ctx, bs, p)
	switch {
	case err != nil:
		return s.wrap("batch-commit", err)
	case notFound != nil || row.Token != c.Lease.Token:
		return fmt.Errorf("pgstore: %w: %s token %d, stored %d", dedup.ErrFenced, p, c.Lease.Token, row.Token)
	case retried && row.Next == c.Next:
		return nil
	}
	return fmt.Errorf("pgstore: %w: %s commit from %d, stored next %d", dedup.ErrOffsetMismatch, p, c.From, row.Next)
}

// batchEnded turns a write's ending of the transaction into a
// *TxEndedError that says whether the offset row moved with it.
func (s *Store) batchEnded(ctx context.Context, bs *batchStatements, c dedup.OffsetCommit, ee *endedError) error {
	row, notFound, err := s.readOffset(ctx, bs, c.Lease.Partition)
	if err != nil {
		return s.wrap("batch-commit", fmt.Errorf("%w (write %d); whether the batch was committed is unknown: %w", ErrTxEnded, ee.index, err))
	}
	committed := notFound == nil && row.Token == c.Lease.Token && row.Next == c.Next && c.Next != c.From
	return s.wrap("batch-commit", &TxEndedError{Index: ee.index, Committed: committed})
}

// plainExec is w as an Exec a pipeline can carry: one with no pgx option
// before its arguments (runExec reads those itself).
func plainExec(w dedup.Write) (Exec, bool) {
	var e Exec
	switch w := w.(type) {
	case Exec:
		e = w
	case *Exec:
		e = *w
	default:
		return Exec{}, false
	}
	if len(e.Args) > 0 {
		switch e.Args[0].(type) {
		case pgx.QueryExecMode, pgx.QueryRewriter:
			return Exec{}, false
		}
	}
	return e, true
}

// batchWrites applies writes in tx as businessWrites does, in order, but
// sends each run of two or more plain Execs in one round trip: a batch
// of hundreds of inserts costs one round trip, not hundreds. Every
// statement still goes by the extended protocol, which refuses several
// in one; over a connection whose default mode is the simple protocol,
// each write goes alone.
func batchWrites(ctx context.Context, tx pgx.Tx, writes []dedup.Write) error {
	simple := tx.Conn().Config().DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol
	for i := 0; i < len(writes); {
		j := i
		for !simple && j < len(writes) {
			if _, ok := plainExec(writes[j]); !ok {
				break
			}
			j++
		}
		var err error
		if j-i >= 2 {
			err = pipeExecs(ctx, tx, writes[i:j], i)
			i = j
		} else {
			err = applyWrite(ctx, tx, i, writes[i])
			i++
		}
		if err != nil {
			if isDecision(err) {
				return err
			}
			return &writeError{err: err}
		}
	}
	return nil
}

// pipeExecs sends run, writes first onwards, all plain Execs, in one
// round trip and reads every result: a statement that ended the
// transaction (COMMIT, ROLLBACK) is reported before any failure, since
// the server ran what followed it outside the transaction; else the
// first failure, as applyWrite reports it.
func pipeExecs(ctx context.Context, tx pgx.Tx, run []dedup.Write, first int) error {
	var q pgx.Batch
	execs := make([]Exec, len(run))
	for k, w := range run {
		execs[k], _ = plainExec(w)
		q.Queue(execs[k].SQL, execs[k].Args...)
	}
	br := tx.SendBatch(ctx, &q)
	var failed error
	ended := -1
	for k, e := range execs {
		tag, err := br.Exec()
		switch {
		case ended < 0 && (tag.String() == "COMMIT" || tag.String() == "ROLLBACK"):
			ended = first + k
		case failed != nil:
		case err != nil:
			failed = writeFailed(first+k, err)
		case e.MustAffect && tag.RowsAffected() == 0:
			failed = writeFailed(first+k, fmt.Errorf("%w: the statement changed no row", ErrRejected))
		}
	}
	cerr := br.Close()
	if ended < 0 && tx.Conn().PgConn().TxStatus() == 'I' {
		ended = first + len(run) - 1
	}
	switch {
	case ended >= 0:
		return &endedError{index: ended}
	case failed != nil:
		return failed
	}
	return cerr
}
