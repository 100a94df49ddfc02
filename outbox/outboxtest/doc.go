// Package outboxtest is the conformance suite every outbox.Sender runs,
// against its real broker: what it sends reaches an onceq consumer
// downstream with the entry's ID as its key, so that a re-dispatched copy
// is a duplicate there; the order of a lane is kept where the destination
// keeps order; a destination that does not exist, or a message too
// large, is refused for good (outbox.ErrRefused).
//
// Only tests import this package; it imports the consumer and the
// in-memory dedup store to run the consumer downstream.
package outboxtest
