// Package outbox sends onward, exactly once, the messages a handler
// returns with its result.
//
// A handler returns outgoing messages (consumer.Result.Outbox). The Store
// commits them as outbox entries in the same transaction as the message's
// COMPLETED record, so that they exist exactly when the message's effects
// do: a duplicate of the input creates none again, a rejected or failed
// run creates none. A Relay then reads the undispatched entries, hands
// them to a Sender (SQS, Kafka) and marks them dispatched.
//
// A relay that dies between sending and marking sends the entry again:
// the destination sees it at least once. Every entry carries a stable ID
// (ID) as onceq's idempotency key, so an onceq consumer downstream
// absorbs the second copy and the effect happens exactly once end to end.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Message is one message a handler sends onward.
type Message struct {
	// Destination names where it goes, as the Sender understands it: an
	// SQS queue URL, a Kafka topic.
	Destination string
	// OrderingKey orders the messages that share it within a Destination:
	// a relay sends them in the order they were committed. It is the Kafka
	// record key, the SQS FIFO message group. Empty: no order is kept.
	OrderingKey string
	// Body is the message's payload.
	Body []byte
	// Headers are sent as Kafka record headers or SQS message attributes.
	Headers map[string]string
}

// ID is the stable identity of the index-th outgoing message of the input
// whose idempotency key is key. A re-dispatch carries the same ID, sent as
// onceq's idempotency key (and the SQS FIFO deduplication ID), so that
// the consumer downstream takes it as the same message.
func ID(key string, index int) string { return key + "#out" + strconv.Itoa(index) }

// State is where an entry stands.
type State string

// The entry states.
const (
	// Pending: committed, not yet dispatched.
	Pending State = "PENDING"
	// Dispatched: the destination took it. It expires after its retention.
	Dispatched State = "DISPATCHED"
	// Dead: the destination refused it for good (too large, no such queue
	// or topic). It never blocks the entries behind it; an operator sees
	// it with onceq inspect.
	Dead State = "DEAD"
)

// Entry is a stored outgoing message.
type Entry struct {
	Message
	// ID is ID(key, index) of the input that sent it.
	ID string
	// Seq orders the entries of one Destination and OrderingKey as they
	// were committed.
	Seq int64
	// State is Pending, Dispatched or Dead.
	State State
	// Lease fences the relay that holds the entry (from Store.Lease).
	Lease Lease
	// Attempts counts the sends that failed for a reason of the moment
	// (Store.Retry); an entry given back unsent (Store.Release) keeps it.
	Attempts int
	// Releases counts the times a relay gave the entry back unsent
	// (Store.Release): held back behind a failed entry of its lane, or
	// left when the relay stopped.
	Releases  int
	LastError string
	CreatedAt time.Time
	// ExpiresAt is the relay's lease while Pending, the retention after.
	ExpiresAt time.Time
}

// Lease is a relay's hold on an entry, fenced as a record's lease is: a
// mark with a lease no longer held is refused with ErrLeaseLost. Each
// Store.Lease, Store.Retry and Store.Release of an entry raises its
// Version by one, so that a relay can tell an entry whose earlier lease
// ran out (a takeover) from one given back (Attempts plus Releases).
type Lease struct {
	ID      string
	Owner   string
	Version int64
}

// LeaseRequest asks a Store for entries to send.
type LeaseRequest struct {
	// Owner is the relay's token.
	Owner string
	Now   time.Time
	// LeaseUntil is when the lease on each returned entry ends if the
	// relay neither marks nor renews it: another relay may then take it.
	LeaseUntil time.Time
	// Max bounds how many entries are returned.
	Max int
}

// Store is what a Relay needs from the store that holds the outbox: the
// relay's view of it, which a dedup.Store that commits outgoing messages
// hands over in its Capabilities (dedup.Capabilities.Outbox).
type Store interface {
	// Check verifies, before the first entry is committed or leased, that
	// the outbox can work: its table exists with the expected layout and
	// can be read and written. An error is a fault of the deployment (a
	// consumer that sends onward does not start). An outbox with nothing
	// to check (one in memory) returns nil.
	Check(ctx context.Context) error
	// Lease takes up to Max Pending entries whose lease is free, fenced
	// by Owner and Version. It returns an entry only when every earlier
	// Pending entry of its Destination and OrderingKey is returned with
	// it, earlier in the slice, so that relays on several machines keep
	// each order and never send one entry at the same time. With an
	// error it may return the entries it took before the failure, under
	// the same rule: the relay sends them.
	Lease(ctx context.Context, req LeaseRequest) ([]Entry, error)
	// Dispatched marks the leased entries sent; they expire at
	// retainUntil. ErrLeaseLost (joined per entry) for a lease no longer
	// held.
	Dispatched(ctx context.Context, leases []Lease, now, retainUntil time.Time) error
	// Retry gives a leased entry back after a failure of the moment,
	// counting the attempt (Attempts): it can be leased again from
	// retryAt.
	Retry(ctx context.Context, lease Lease, reason string, now, retryAt time.Time) error
	// Release gives a leased entry back unsent, with why (its LastError):
	// it can be leased again from retryAt. It counts no attempt, only a
	// release (Releases): the entry's own failures alone set its backoff.
	Release(ctx context.Context, lease Lease, reason string, now, retryAt time.Time) error
	// Dead marks a leased entry refused for good, with its reason, kept
	// until retainUntil.
	Dead(ctx context.Context, lease Lease, reason string, now, retainUntil time.Time) error
	// Entries lists stored entries, in Seq order per lane, for operators
	// (onceq inspect) and tests: those in state, or all when state is "".
	Entries(ctx context.Context, state State, limit int) ([]Entry, error)
	// Pager lists entries a page at a time, for an operator's pass over
	// all of them (onceq redrive) that reads the outbox once.
	Pager
	// Requeuer puts a Dead entry back to Pending, for an operator's
	// redrive.
	Requeuer
}

// Sender sends entries to their destinations. Send returns one error per
// entry, nil for an entry the destination took. An error that wraps
// ErrRefused is the destination's refusal for good (the entry is too
// large, its queue or topic does not exist, no destination takes it:
// Refusal): the entry goes Dead. Any other error is of the moment, and
// the entry is sent again later. A Sender answers every input it can
// never send with a refusal, never with an error of the moment, which
// the relay would retry for ever. A Send that panics fails each of its
// entries for the moment (a panic in a goroutine it starts is beyond the
// relay's reach).
type Sender interface {
	Send(ctx context.Context, entries []Entry) []error
}

// LaneSender is a Sender that keeps each lane's order within one Send:
// of the entries of one Destination and OrderingKey it is handed, in
// order, it delivers none after one it could not deliver for a reason of
// the moment (each of those answers an error of the moment too; a
// refusal blocks nothing). A Relay hands such a Sender every entry of a
// pass in one call, a lane's entries together, rather than a lane's
// entries one per call.
type LaneSender interface {
	Sender
	// KeepsLaneOrder reports whether Send keeps each lane's order, as
	// LaneSender says (a wrapper answers for the Sender it wraps).
	KeepsLaneOrder() bool
}

// ErrRefused marks a destination's refusal of an entry for good.
var ErrRefused = errors.New("outbox: the destination refused the message")

// ErrLeaseLost is a mark whose lease another relay has since taken.
var ErrLeaseLost = errors.New("outbox: the entry's lease is no longer held")

// RefusedError is a Sender's refusal of one entry for good.
type RefusedError struct {
	Destination string
	Reason      string
}

func (e *RefusedError) Error() string {
	switch d := e.Destination; {
	case d == "":
		return "outbox: the message was refused: " + e.Reason
	case !utf8.ValidString(d) || hasControl(d):
		return fmt.Sprintf("outbox: %s refused the message: %s", strconv.QuoteToASCII(d), e.Reason)
	}
	return fmt.Sprintf("outbox: %s refused the message: %s", e.Destination, e.Reason)
}

// Unwrap makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Unwrap() error { return ErrRefused }
