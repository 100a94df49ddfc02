package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/onceq/onceq/retry"
)

// ErrRejected is what a Func returns (or wraps) to say its own condition
// failed: the commit is cancelled as a *dedup.BusinessConditionError.
var ErrRejected = errors.New("pgstore: business write rejected")

// Error is a failed call to PostgreSQL: which operation, on which table,
// and the retry class of the cause (retry.Classify reads it).
type Error struct {
	Op    string // claim, complete, fail, extend, get, check, cleanup, create-table
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
