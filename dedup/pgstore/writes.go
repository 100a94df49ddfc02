package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceq/onceq/dedup"
)

// Exec is a business write: a statement and its arguments, run in the
// transaction that writes COMPLETED. With MustAffect, a statement that
// changes no row (its WHERE is its condition: "UPDATE stock SET n = n - 1
// WHERE sku = $1 AND n > 0") cancels the commit as a
// *dedup.BusinessConditionError.
type Exec struct {
	SQL        string
	Args       []any
	MustAffect bool
}

// Func is a business write as code: it runs in the transaction that writes
// COMPLETED, and its error cancels the commit. Returning (or wrapping)
// ErrRejected makes that a *dedup.BusinessConditionError; any other error
// is returned as it is, classified as the Store's are.
type Func func(ctx context.Context, tx pgx.Tx) error

// Kind is the kind of business write the Store commits: Exec's and Func's.
const Kind dedup.WriteKind = "pgstore"

// WriteKind implements dedup.Write.
func (Exec) WriteKind() dedup.WriteKind { return Kind }

// WriteKind implements dedup.Write.
func (Func) WriteKind() dedup.WriteKind { return Kind }

// asWrites checks ws are the Store's own writes: Exec, *Exec and Func.
func asWrites(ws []dedup.Write) ([]dedup.Write, error) {
	for i, w := range ws {
		nilWrite := false
		switch w := w.(type) {
		case Exec:
		case *Exec:
			nilWrite = w == nil
		case Func:
			nilWrite = w == nil
		case nil:
			nilWrite = true
		default:
			return nil, fmt.Errorf("%w: %T (the PostgreSQL store takes pgstore.Exec and pgstore.Func)", dedup.ErrUnsupportedWrite, w)
		}
		if nilWrite {
			return nil, &dedup.NilWriteError{Index: i, Type: fmt.Sprintf("%T", w)}
		}
	}
	return ws, nil
}

// endedError: write index ended the transaction (a COMMIT or ROLLBACK of
// its own). The Store reads the record back to say what that left.
type endedError struct{ index int }

func (e *endedError) Error() string {
	return fmt.Sprintf("business write %d ended the transaction", e.index)
}

// applyWrites runs the writes in order in tx. A failed condition or a
// broken integrity constraint is a *dedup.BusinessConditionError; the
// caller's rollback then takes back the record's write too. A write that
// ended the transaction stops the rest (an *endedError): whatever runs
// after it would run outside it, and COMMIT would report success for a
// transaction that is no more.
func applyWrites(ctx context.Context, tx pgx.Tx, writes []dedup.Write) error {
	for i, w := range writes {
		if err := applyWrite(ctx, tx, i, w); err != nil {
			return err
		}
	}
	return nil
}

// applyWrite runs write i, w, in tx, as applyWrites runs each.
func applyWrite(ctx context.Context, tx pgx.Tx, i int, w dedup.Write) error {
	var err error
	switch w := w.(type) {
	case Exec:
		err = runExec(ctx, tx, w)
	case *Exec:
		err = runExec(ctx, tx, *w)
	case Func:
		err = w(ctx, tx)
	}
	// 'I': idle, outside any transaction ('T' in one, 'E' in a failed one).
	if tx.Conn().PgConn().TxStatus() == 'I' {
		return &endedError{index: i}
	}
	if err == nil {
		return nil
	}
	return writeFailed(i, err)
}

// writeFailed is the failure err of write i: a failed condition or a
// broken integrity constraint is a *dedup.BusinessConditionError.
func writeFailed(i int, err error) error {
	if errors.Is(err, ErrRejected) {
		return &dedup.BusinessConditionError{Index: i, Reason: "ConditionFailed", Message: err.Error()}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "23") { // integrity constraint violation
		return &dedup.BusinessConditionError{Index: i, Reason: "IntegrityConstraintViolation", Message: pe.ConstraintName}
	}
	return fmt.Errorf("business write %d: %w", i, err)
}

// runExec runs w as one statement: by PostgreSQL's extended protocol,
// which refuses a string of several ("ROLLBACK; INSERT …" would otherwise
// end the transaction and run the INSERT on its own). pgx sends a
// statement without arguments, or any under QueryExecModeSimpleProtocol,
// by the simple protocol, which runs them all: those go another way.
func runExec(ctx context.Context, tx pgx.Tx, w Exec) error {
	conn := tx.Conn()
	sql, args := w.SQL, w.Args
	mode := conn.Config().DefaultQueryExecMode
	var rewriter pgx.QueryRewriter
	// pgx's own reading of the arguments: leading options, then the rest.
options:
	for len(args) > 0 {
		switch a := args[0].(type) {
		case pgx.QueryExecMode:
			mode = a
		case pgx.QueryRewriter:
			rewriter = a
		default:
			break options
		}
		args = args[1:]
	}
	if rewriter != nil {
		var err error
		if sql, args, err = rewriter.RewriteQuery(ctx, conn, sql, args); err != nil {
			return err
		}
	}
	var tag pgconn.CommandTag
	var err error
	if len(args) == 0 {
		tag, err = conn.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Close()
	} else {
		if mode == pgx.QueryExecModeSimpleProtocol {
			mode = pgx.QueryExecModeDescribeExec
		}
		tag, err = tx.Exec(ctx, sql, append([]any{mode}, args...)...)
	}
	if err != nil {
		return err
	}
	if w.MustAffect && tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: the statement changed no row", ErrRejected)
	}
	return nil
}
