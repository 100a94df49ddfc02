package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/retry"
)

// ErrOutboxUnsupported: the handler sends onward (Result.Outbox, or the
// SendsOnward option), and the Store does not commit outgoing messages
// (its dedup.Capabilities give no Outbox). The error is an
// *OutboxUnsupportedError.
var ErrOutboxUnsupported = errors.New("consumer: the Store does not commit outgoing messages")

// OutboxUnsupportedError is a handler that sends onward over a Store that
// cannot commit what it sends with the COMPLETED record (a Store without
// transactions, such as Redis's). It is a fault of the deployment (retry
// class Misconfigured), never of a message: New and NewGuard return it,
// wrapped with ErrInvalidConfig, when SendsOnward is given; otherwise the
// first Result with Outbox meets it, the Guard refuses the commit before
// calling the Store, the message is given back with its attempt unspent,
// never dead-lettered, and a Consumer stops with ErrMisconfigured
// wrapping it.
type OutboxUnsupportedError struct {
	Store string // the Store's type, as "*redisstore.Store"
	// Messages is how many outgoing messages the handler returned; 0
	// when refused at start (SendsOnward).
	Messages int
}

func (e *OutboxUnsupportedError) Error() string {
	if e.Messages == 0 {
		return fmt.Sprintf("consumer: the handler sends onward, and the Store (%s) does not commit outgoing messages (its Capabilities give no Outbox)", e.Store)
	}
	return fmt.Sprintf("consumer: the handler returned %d outgoing messages, and the Store (%s) does not commit outgoing messages (its Capabilities give no Outbox)",
		e.Messages, e.Store)
}

// Is makes errors.Is(err, ErrOutboxUnsupported) true.
func (e *OutboxUnsupportedError) Is(target error) bool { return target == ErrOutboxUnsupported }

// RetryClass: a Store chosen for a handler it cannot serve, which no
// retry mends.
func (e *OutboxUnsupportedError) RetryClass() retry.Class { return retry.Misconfigured }

// SendsOnward declares that the handler returns outgoing messages
// (Result.Outbox). New and NewGuard then refuse, with an
// *OutboxUnsupportedError, a Store whose Capabilities give no Outbox,
// before any message is taken, instead of stopping at the first message
// that sends. Check (and Run) then check the Store's outbox too, through
// the relay's view its Capabilities hand over (outbox.Store.Check: the
// PostgreSQL and DynamoDB stores' outbox table exists).
func SendsOnward() GuardOption { return guardFunc(func(c *config) { c.sendsOnward = true }) }

// outboxSupport is whether a Guard's Store commits outgoing messages.
type outboxSupport struct {
	store string // the Store's type, for the error
	ok    bool
	// view is the relay's view of the Store's outbox, as its
	// Capabilities hand it over, when the handler sends onward (its Check
	// is the Guard's); nil otherwise.
	view outbox.Store
}

// checkOutbox runs the outbox's check, a panic in it being a fault of
// the deployment.
func (s outboxSupport) checkOutbox(ctx context.Context, log *slog.Logger) (err error) {
	if s.view == nil {
		return nil
	}
	defer recovered(log, "store", "Outbox.Check", &err)
	return s.view.Check(ctx)
}

// check refuses n outgoing messages the Store cannot commit.
func (s outboxSupport) check(n int) error {
	if n > 0 && !s.ok {
		return &OutboxUnsupportedError{Store: s.store, Messages: n}
	}
	return nil
}
