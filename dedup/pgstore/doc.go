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
// Table names: each part of a (possibly schema-qualified) name must fit in
// the 63 bytes PostgreSQL keeps of an identifier; it would cut a longer one,
// and two names that share their first 63 bytes would be one table. Such a
// name, an empty part or a NUL byte is refused by CreateTable and New with
// a *TableNameError. The table is WithTable's, by default
// dedup.DefaultTable ("onceq_records"). Every name CreateTable derives
// from it (the outbox and offsets tables, the outbox's sequence, the
// indexes) fits in 63 bytes too: where the table's name and a suffix pass
// that, the name is cut, with a hash of the whole where a cut name would
// be another's.
//
// Keys are opaque bytes of any length: a key of up to 1024 bytes is stored
// as it is (bytea, one tag byte before it), a longer one as its SHA-256
// under another tag, so the two forms never meet and the primary key's
// index never holds a row too large for it.
//
// Business writes: CompleteRequest.Writes and ClaimCompleteRequest.Writes
// take Exec (a statement with arguments) and Func (a function of the
// transaction; a function literal is converted, Func(f)), the Store's
// dedup.Write types, of kind Kind. Both run in the transaction that writes COMPLETED, after
// the fence held: COMPLETED never commits without them, nor they without
// it. An Exec with MustAffect that changes no row, a Func that returns
// ErrRejected, or a write that breaks an integrity constraint (a unique
// key, a check) cancels the whole commit with a *dedup.BusinessConditionError.
// An Exec is one statement, sent by the extended protocol, which refuses
// several ("ROLLBACK; INSERT …" is an error and nothing commits). A write
// that ends the transaction itself (COMMIT, ROLLBACK) stops the rest, and
// the call returns a *TxEndedError saying whether COMPLETED was committed.
// The Store names the records table with its schema, found on its first
// call, so a write's SET search_path, which outlives the transaction on a
// pooled connection, never sends the Store to another schema's table.
// Writes see this key's record as COMPLETED (their own transaction's
// update, its row locked until commit); they may read or change the
// records table as the role may, and should leave it alone.
//
// Batch mode: the Store's Capabilities hand over its batch view
// (dedup.Capabilities.Offsets, batch.Store; Offsets returns it too).
// Each Kafka partition's offset row (group, topic, partition, fencing
// token, next offset) lives in the offsets table beside the records table
// (OffsetsTable: the records table's name with "_offsets"; CreateTable
// makes both). A batch commits in one transaction: its first round trip
// begins it, moves the offset row only under the lease's token and from
// the batch's first offset, and writes the batch's keys as COMPLETED
// records in one INSERT (a key live in any state is a duplicate; an
// expired record is taken over as a claim takes it); then the business
// writes, each run of plain Execs sent in one round trip; then COMMIT.
// A batch of any size costs three round trips and no bound.
//
// Outbox: CompleteRequest.Outbox and ClaimCompleteRequest.Outbox are
// inserted into the outbox table (OutboxTable: the records table's name
// with "_outbox", made by CreateTable, with its sequence OutboxSequence)
// in the transaction that writes COMPLETED, at most MaxOutboxPerCommit per commit, and a NOTIFY on the
// table's channel wakes the relays when it commits. Store.Outbox gives the
// relay's view (an *Outbox): Lease takes entries FOR UPDATE SKIP LOCKED,
// one relay per lane at a time and each lane in order; Wait blocks until a
// commit notifies, on a connection of its own (LISTEN); DeleteExpired
// removes dispatched and dead entries past their retention.
//
// Corrupt records: a row that is not a record the Store writes (a status
// outside the four, a version below 1, negative attempts, a NULL column, a
// time Go cannot hold) is refused by Claim, ClaimComplete and Get with a
// *dedup.CorruptRecordError (retry class Permanent), expired or not: a
// claim never takes one over.
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
//
// Retries and instruments: every statement, and every transaction with
// business writes as a whole, runs through the instruments every store
// has (package storeinstr): retried under WithRetryPolicy while its fault
// is Transient or Throttled, timed and counted (db.client.operation.duration,
// onceq.store.errors, onceq.store.retries, with db.system.name
// postgresql), told to the hooks and to the retry observer of every
// Consumer over the store (Attach), which slows down on throttles, logged
// and traced. A business write's own
// failure is returned as it is, not retried. A claim or fenced update
// retried after a lost connection, which its first attempt may have
// committed, recognises its own record (the claim's owner; the status and
// version the update writes) and reports success, not a conflict.
package pgstore
