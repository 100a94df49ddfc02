// Package memstore is an in-process dedup.Store with the exact semantics of
// the DynamoDB Store: the embedded default and the store of fast tests.
// Records live in the process; they survive nothing.
//
// Limits: a response longer than MaxResponseSize (default
// dedup.DefaultMaxResponseSize, 256 KiB) is refused by Complete and
// ClaimComplete with a *dedup.ResponseTooLargeError, and a nil write with a
// *dedup.NilWriteError, before anything is written. Fail stores its reason
// as dedup.StorableReason makes it (valid UTF-8, at most 1,024 bytes).
//
// Batch mode: the Store's Capabilities hand over its batch view
// (dedup.Capabilities.Offsets, as Offsets gives it), the offset rows of
// Kafka partitions, committed with memstore Writes and with the batch's
// Keys as COMPLETED records of the same Store, all under one lock; a
// commit has no bound on its size.
//
// Outgoing messages (dedup.CompleteRequest.Outbox) commit with COMPLETED
// under the same locks; the Store's Capabilities hand over the relay's
// view of them (dedup.Capabilities.Outbox, as Outbox gives it).
//
// It imports only packages dedup and outbox; anything may import it.
package memstore
