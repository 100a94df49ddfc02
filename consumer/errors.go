package consumer

import (
	"errors"
	"fmt"
)

// Errors of the consumer. Test with errors.Is / errors.As.
var (
	// ErrSourceClosed is returned by a Source's Receive once it is closed.
	ErrSourceClosed = errors.New("consumer: source closed")
	// ErrInvalidConfig wraps every configuration error New returns.
	ErrInvalidConfig = errors.New("consumer: invalid configuration")
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
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}
