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
// Batch mode: Offsets gives the Store's batch.Store, the offset rows of
// Kafka partitions, committed with memstore Writes and with the batch's
// Keys as COMPLETED records of the same Store, all under one lock; a
// commit has no bound on its size.
//
// It imports only packages dedup and batch; anything may import it.
package memstore
