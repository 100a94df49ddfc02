package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/retry"
)

// ErrRejected is what a Func returns (or wraps) to say its own condition
// failed: the commit is cancelled as a *dedup.BusinessConditionError.
var ErrRejected = errors.New("pgstore: business write rejected")

// Error is a failed call to PostgreSQL: which operation, on which table,
// and the retry class of the cause (retry.Classify reads it).
type Error struct {
	Op    string // claim, complete, fail, extend, get, check, cleanup, create-table, new, batch-acquire, batch-commit, batch-offset, outbox-lease, outbox-dispatched, ...
	Table string
	Err   error
	class retry.Class
}

func (e *Error) Error() string {
	return fmt.Sprintf("pgstore: %s on table %s (%s): %v", e.Op, e.Table, e.class, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// RetryClass is the class of the cause (see classOf).
func (e *Error) RetryClass() retry.Class { return e.class }

func (s *Store) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Table: s.table, Err: err, class: classOf(err)}
}

// catalogError is an error the store finds itself in the catalog (a
// table that is missing, a privilege the role lacks), made as PostgreSQL
// reports one so that classOf and errorCode read it alike. Its Severity
// is set: PgError's text starts with it.
func catalogError(code, format string, args ...any) *pgconn.PgError {
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: fmt.Sprintf(format, args...)}
}

// errorCode is the SQLSTATE of err, "" when it has none (a lost
// connection): db.response.status_code of the store's metrics.
func errorCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// classOf sorts PostgreSQL's SQLSTATEs into retry classes; network errors
// and unknown states are Transient as retry.Classify has them.
func classOf(err error) retry.Class {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return retry.Cancelled
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return retry.Classify(err)
	}
	switch code := pe.Code; {
	case code == "40001", code == "40P01": // serialization failure, deadlock
		return retry.Transient
	case strings.HasPrefix(code, "08"), // connection exception
		strings.HasPrefix(code, "57P"), // shutdown, cannot connect now
		code == "53300":                // too many connections
		return retry.Transient
	case code == "42P01", code == "42703", code == "42883", // undefined table, column, function
		code == "42809",               // wrong object type: a name that is not the relation the Store made
		code == "42501",               // insufficient privilege
		code == "3D000",               // database does not exist
		code == "3F000",               // schema does not exist
		strings.HasPrefix(code, "28"): // authentication
		return retry.Misconfigured
	case strings.HasPrefix(code, "22"), // data exception
		code == "54000": // program limit exceeded (a row too large)
		return retry.Permanent
	}
	return retry.Transient
}

// ErrTxEnded: a business write ended the transaction it was given (a COMMIT
// or ROLLBACK of its own), so its writes and COMPLETED can no longer commit
// as one. The error is a *TxEndedError.
var ErrTxEnded = errors.New("pgstore: a business write ended the transaction")

// TxEndedError says which write ended the transaction and what that left
// stored. The handler's SQL is at fault, for every message it handles: the
// retry class is Misconfigured.
type TxEndedError struct {
	Index int // the write, in the request's Writes
	// Committed: the transaction was committed, COMPLETED with it (and the
	// writes before Index); the writes after Index never ran. Otherwise
	// nothing of the transaction is stored.
	Committed bool
}

func (e *TxEndedError) Error() string {
	if e.Committed {
		return fmt.Sprintf("%v: write %d committed it, COMPLETED and the writes before it are stored, the writes after it never ran", ErrTxEnded, e.Index)
	}
	return fmt.Sprintf("%v: write %d rolled it back, nothing of the transaction is stored", ErrTxEnded, e.Index)
}

// Is makes errors.Is(err, ErrTxEnded) true.
func (e *TxEndedError) Is(target error) bool { return target == ErrTxEnded }

// RetryClass: the handler's SQL does it again on every try.
func (e *TxEndedError) RetryClass() retry.Class { return retry.Misconfigured }

// ErrInvalidConfig wraps every configuration error of the package. It is
// the ErrInvalidConfig of every onceq package: errors.Is with any of them
// matches.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// TableNameError: a records table name PostgreSQL would not keep as given
// (it cuts an identifier to its first 63 bytes, so two longer names that
// share them are one table). Every call of a Store over it returns it, as
// CreateTable does.
type TableNameError struct {
	Table  string // as given
	Reason string
}

func (e *TableNameError) Error() string {
	return fmt.Sprintf("pgstore: %v: table %q: %s", ErrInvalidConfig, e.Table, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *TableNameError) Is(target error) bool { return target == ErrInvalidConfig }

// RetryClass: the name is wrong for every call.
func (e *TableNameError) RetryClass() retry.Class { return retry.Misconfigured }
