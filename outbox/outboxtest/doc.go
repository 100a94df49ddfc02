// Package outboxtest is the conformance suite every outbox.Sender runs,
// against its real broker: what it sends reaches an onceq consumer
// downstream with the entry's ID as its key, so that a re-dispatched copy
// is a duplicate there; the order of a lane is kept where the destination
// keeps order; an entry no destination of the kind can take (an empty
// Destination or one with a control character, an invalid or missing
// one, a message too large) is refused for good with an
// *outbox.RefusedError, never failed for the moment.
//
// Only tests import this package; it imports the consumer and the
// in-memory dedup store to run the consumer downstream.
package outboxtest
