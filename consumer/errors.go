package consumer

import (
	"errors"
	"fmt"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/configerr"
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
)

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
