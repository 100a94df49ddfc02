package idempotency

import (
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/retry"
)

// Errors of Do. Test with errors.Is / errors.As.
var (
	// ErrKeyReuse: the key is held by a call with another payload. The
	// error is a *dedup.KeyReuseError, whose text names the key by its
	// hash only.
	ErrKeyReuse = dedup.ErrKeyReuse
	// ErrInProgress: an earlier call with the key has not finished (it
	// still runs, or it failed so lately that its record cannot be taken
	// yet). The error is an *InProgressError.
	ErrInProgress = errors.New("idempotency: an earlier call with the key is in progress")
	// ErrStoreUnavailable: the Store could not be reached or refused for
	// a reason of the deployment. The error is a *StoreError; nothing was
	// stored for the call.
	ErrStoreUnavailable = errors.New("idempotency: store unavailable")
	// ErrNotInCall: Tx.Write or Tx.OnRejected was called after the
	// function the Tx was handed to returned, or on a nil Tx.
	ErrNotInCall = errors.New("idempotency: the call's function has returned")
)

// InProgressError is a repeat that met an earlier call with its key still
// running (or failed a moment ago). Its text names the key by its hash.
type InProgressError struct {
	KeyHash string
	// RetryAfter is how long to wait before the repeat is worth trying
	// again: at most a second, since the first call most often ends long
	// before its lease could (a holder that died keeps the key until its
	// lease expires, InProgressExpiry after its last heartbeat).
	RetryAfter time.Duration
	// Err is the cause: the Guard's account of the held record, or
	// dedup.ErrLeaseLost when this call's own lease was taken over while
	// its function ran (its result was not committed).
	Err error
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("idempotency: key_hash %s is in progress; retry after %v: %v", e.KeyHash, e.RetryAfter, e.Err)
}

// Is makes errors.Is(err, ErrInProgress) true.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

func (e *InProgressError) Unwrap() error { return e.Err }

// StoreError is a store call that failed: an outage (Class Transient or
// Throttled) or a fault of the deployment (Misconfigured: a missing
// table, denied access). The call's function did not run, or ran and
// could not be recorded; its answer is not stored.
type StoreError struct {
	Class      retry.Class
	RetryAfter time.Duration
	Err        error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("idempotency: store unavailable (%s): %v", e.Class, e.Err)
}

// Is makes errors.Is(err, ErrStoreUnavailable) true.
func (e *StoreError) Is(target error) bool { return target == ErrStoreUnavailable }

func (e *StoreError) Unwrap() error { return e.Err }

// RetryClass is the outage's class, for retry.Classify.
func (e *StoreError) RetryClass() retry.Class { return e.Class }
