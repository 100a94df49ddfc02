// Package pgstore is a dedup.Store on PostgreSQL (pgx v5), whose records
// live in one table beside the service's own, so that a handler's business
// writes commit in the same transaction as its COMPLETED record.
//
// Records: one row per key (see CreateTable for the table). A claim of a
// new key is one statement (INSERT … ON CONFLICT DO NOTHING) that reads
// nothing back; a key that has a record costs a second (INSERT … ON
// CONFLICT … DO UPDATE … WHERE expired), which takes an expired record
// over and reads the one it replaced, or reads the live record that wins.
// Complete, Fail and Extend are UPDATEs fenced by owner and version. All
// times compared are the callers' (the request's Now), never the
// server's clock.
//
// Keys are opaque bytes of any length: a key of up to 1024 bytes is stored
// as it is (bytea, one tag byte before it), a longer one as its SHA-256
// under another tag, so the two forms never meet and the primary key's
// index never holds a row too large for it.
//
// Business writes: CompleteRequest.Writes and ClaimCompleteRequest.Writes
// take Exec (a statement with arguments) and Func (a function of the
// transaction). Both run in the transaction that writes COMPLETED, after
// the fence held: COMPLETED never commits without them, nor they without
// it. An Exec with MustAffect that changes no row, a Func that returns
// ErrRejected, or a write that breaks an integrity constraint (a unique
// key, a check) cancels the whole commit with a *dedup.BusinessConditionError.
//
// Limits: a response longer than MaxResponseSize (default
// dedup.DefaultMaxResponseSize, 256 KiB) is refused by Complete and
// ClaimComplete with a *dedup.ResponseTooLargeError, and a nil write with a
// *dedup.NilWriteError, before anything is written. Fail stores its reason
// as dedup.StorableReason makes it (valid UTF-8, no NUL, at most 1,024
// bytes), which a text column always takes. A claim reads the response
// of the record it meets only when that record is COMPLETED.
//
// Expiry: PostgreSQL has no TTL. An expired row counts as absent for
// claims, so correctness never waits for its deletion; to bound the table,
// run Cleanup in a goroutine (or DeleteExpired from a scheduled job). Each
// batch is one DELETE of at most Batch rows found through the expiry index:
// its cost is the rows' deletion and their WAL, and the dead tuples are
// left to autovacuum.
//
// Faults: errors carry a retry class (retry.Classify): a lost connection,
// a serialization failure or a deadlock is Transient; an undefined table
// or column, denied permission, failed authentication or a missing
// database is Misconfigured, which Check reports before the first claim.
package pgstore
