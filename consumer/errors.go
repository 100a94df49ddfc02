package consumer

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/retry"
)

// Errors of the consumer. Test with errors.Is / errors.As.
var (
	// ErrSourceClosed is returned by a Source's Receive once it is closed
	// ([broker.ErrSourceClosed]).
	ErrSourceClosed = broker.ErrSourceClosed
	// ErrMisconfigured wraps every fault of the deployment rather than of a
	// message: a missing table or queue, denied access, a wrong table
	// layout, a clock too far off, a Source or Store that fails its Check.
	// Run returns it (before the first receive, or as soon as a store call
	// meets one), and no message is dead-lettered for it.
	ErrMisconfigured = errors.New("consumer: misconfigured")
	// ErrRunTwice is returned by a second call of Consumer.Run.
	ErrRunTwice = errors.New("consumer: Run called twice; a Consumer runs once")
	// ErrInvalidConfig wraps every configuration error New and NewGuard
	// return. It is the ErrInvalidConfig of every onceq package (the
	// stores, the sources): errors.Is with any of them matches.
	ErrInvalidConfig = configerr.ErrInvalidConfig
	// ErrHandlerPanic wraps a recovered handler panic.
	ErrHandlerPanic = errors.New("consumer: handler panicked")
	// ErrPermanent marks a handler error that no retry can fix: the message
	// is dead-lettered at once. Wrap with Permanent.
	ErrPermanent = errors.New("consumer: permanent failure")
	// ErrPanicked wraps a panic recovered from a Store or Source call: a
	// *PanicError, a fault of the deployment (a bug in the Store or Source
	// given), never of a message.
	ErrPanicked = errors.New("consumer: a Store or Source call panicked")
	// ErrAttemptsExhausted is the dead-letter cause once MaxAttempts is
	// reached.
	ErrAttemptsExhausted = errors.New("consumer: attempts exhausted")
	// ErrTakeoversExhausted is the dead-letter cause once a message's lease
	// was abandoned more than MaxTakeovers times: its handler keeps ending
	// the process that runs it, or running past its lease.
	ErrTakeoversExhausted = errors.New("consumer: takeovers exhausted")
	// ErrHandlerOverran is the cause when a handler returned after its
	// lease could have been taken over: it ignored its context past
	// HandlerTimeout and the grace, renewals had stopped, and its result is
	// not committed.
	ErrHandlerOverran = errors.New("consumer: handler returned after its lease could have ended; result not committed")
)

// PanicError is a panic recovered from a Store or Source call. It is a
// fault of the deployment (retry class Misconfigured): the message is
// given back untouched and a Consumer stops with ErrMisconfigured. The
// panic's stack is logged where it is recovered.
type PanicError struct {
	Seam  string // "store" or "source"
	Call  string // the method that panicked: "Claim", "Ack", ...
	Value any    // what was passed to panic
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("consumer: %s %s panicked: %v", e.Seam, e.Call, e.Value)
}

// Is makes errors.Is(err, ErrPanicked) true.
func (e *PanicError) Is(target error) bool { return target == ErrPanicked }

// RetryClass: a bug of the Store or Source, which no retry mends.
func (e *PanicError) RetryClass() retry.Class { return retry.Misconfigured }

// Permanent marks err as not worth retrying (malformed input, a rule the
// message breaks): the consumer dead-letters the message with err as reason.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return e.err.Error() }
func (e *permanentError) Unwrap() error        { return e.err }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }

func configError(format string, args ...any) error {
	return fmt.Errorf("consumer: %w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// WriteTypeError is a handler's business write of a kind its Store does
// not commit (not its dedup.Capabilities.Writes): a handler written for
// another Store. It is a fault of the deployment (retry class
// Misconfigured), met by every message alike: the Guard refuses the write
// before calling the Store, the message is given back with its attempt
// unspent, never dead-lettered, and a Consumer stops with ErrMisconfigured
// wrapping it.
type WriteTypeError struct {
	Store string          // the Store's type, as "*memstore.Store"
	Index int             // of the write in Result.Writes
	Type  reflect.Type    // the write's type
	Kind  dedup.WriteKind // the write's kind
	Takes dedup.WriteKind // what the Store commits; empty for a Store that takes no writes
}

func (e *WriteTypeError) Error() string {
	if e.Takes == "" {
		return fmt.Sprintf("consumer: the handler returned a business write of type %v (write %d, kind %q), and the Store (%s) commits no business writes",
			e.Type, e.Index, e.Kind, e.Store)
	}
	return fmt.Sprintf("consumer: the handler returned a business write of type %v (write %d, kind %q), and the Store (%s) commits only writes of kind %q",
		e.Type, e.Index, e.Kind, e.Store, e.Takes)
}

// RetryClass: a handler built for another Store, which no retry mends.
func (e *WriteTypeError) RetryClass() retry.Class { return retry.Misconfigured }
