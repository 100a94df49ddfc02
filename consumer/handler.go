package consumer

import (
	"context"

	"github.com/onceq/onceq/dedup"

	"github.com/onceq/onceq/outbox"
)

// Handler processes one message. It returns the Result to commit with the
// COMPLETED record, or an error: wrapped with Permanent it dead-letters the
// message at once, otherwise the message is retried until MaxAttempts.
//
// A Handler may be called more than once for a message only when its lease
// is lost mid-run (a worker stalled past LeaseTTL and another took over);
// effects returned as Result.Writes still happen exactly once, since the
// stalled worker's commit is fenced. Calls to outside systems should pass
// Message.IdempotencyKey as their own idempotency key.
type Handler interface {
	Handle(ctx context.Context, m *Message) (Result, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m *Message) (Result, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m *Message) (Result, error) { return f(ctx, m) }

// Middleware wraps a Handler, as in net/http.
type Middleware func(Handler) Handler

// Chain wraps h in mws, the first outermost.
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// Result is what a handler's work produced.
type Result struct {
	// Response is cached in the COMPLETED record and returned to every
	// duplicate of the message.
	Response []byte
	// Writes are business writes committed in the same atomic operation as
	// the COMPLETED transition; their type belongs to the Store, of the
	// kind its dedup.Capabilities.Writes declares (for dedup/dynamostore a
	// dynamostore.Write, for dedup/pgstore a pgstore.Exec or pgstore.Func,
	// for dedup/memstore a memstore.Write). A write of another Store's
	// kind is a *WriteTypeError, a fault of the deployment: the message is
	// given back and a Consumer stops.
	Writes []dedup.Write
	// RejectResponse is cached instead of Response when one of Writes is
	// refused by its own condition (out of stock, say): the message is then
	// Rejected, nothing is written, and duplicates get the same answer.
	RejectResponse []byte
	// Rejected completes the message as Rejected without Writes, caching
	// Response: for a rule the handler checks itself.
	Rejected bool
	// Outbox are messages to send onward, committed with the COMPLETED
	// record and sent by a relay (package outbox): a duplicate of the
	// message never sends them again, a rejected or failed run sends none.
	// A message no Sender could ever deliver (an empty Destination, see
	// outbox.Message.Check) is the handler's fault: nothing is committed
	// and the message is dead-lettered with an *outbox.UndeliverableError.
	Outbox []outbox.Message
}
