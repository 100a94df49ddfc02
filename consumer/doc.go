// Package consumer runs a [Handler] over a [Source] with exactly-once
// effects: each message's fingerprint is claimed in a [dedup.Store] before
// the handler runs, the handler's [Result] commits with the COMPLETED
// record, and only then is the message acked.
//
// What lives here: [Consumer] (a worker pool over a Source, with ordering,
// heartbeats, adaptive concurrency and a graceful drain), [Guard] (the same
// guarantee for one message, inside a receive loop of your own), the
// [Outcome] of each message and the [Action] it asks of the source,
// options, and observer hooks.
//
// Faults are sorted by whose they are: a message is dead-lettered only for
// its own fault; an outage of the store holds messages without spending
// their attempts ([StoreUnavailable]); a fault of the deployment (a missing
// table, denied access) stops [Consumer.Run] with [ErrMisconfigured]
// before any message is blamed.
//
// The package knows no broker and no database: it talks to a Source
// (package [broker], re-exported here) and a dedup.Store, the way
// database/sql talks to its drivers. It imports no AWS or Kafka package;
// adapters import [broker] and [dedup], never this package.
package consumer
