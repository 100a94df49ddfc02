package outbox

import (
	"errors"

	"github.com/onceq/onceq/internal/configerr"
)

// Errors of the relay. Test with errors.Is.
var (
	// ErrInvalidConfig wraps every configuration error NewRelay returns. It
	// is the ErrInvalidConfig of every onceq package.
	ErrInvalidConfig = configerr.ErrInvalidConfig
	// ErrRunTwice is returned by a second call of Relay.Run.
	ErrRunTwice = errors.New("outbox: Run called twice; a Relay runs once")
)
