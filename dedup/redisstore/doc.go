// Package redisstore is a dedup.Store on Redis 7 or Valkey (go-redis v9):
// each record is one string, deleted by the server's own key expiry.
//
// Calls: a new key's claim is one SET NX (no script: a script call costs
// the server several times a SET). On a key that has a record a GET reads
// it: a live record answers the claim; an expired one is taken over by a
// script that writes only while the record is still the one read.
// Complete, Fail and Extend are Lua scripts, atomic per key, fenced by
// the lease's owner and version (a lease only moves forward).
//
// Layout: the record's fields in one string (record.go), its head
// (status, version, owner) after a layout byte, so that a script fences a
// lease by comparing the string's start. A record that counts takeovers of
// an abandoned lease has its own layout byte, so that every other record
// is stored as earlier versions stored it. Each record has one encoding,
// and a value that is not one (or holds a version below 1 or negative
// attempts) is a corrupt record: a *dedup.CorruptRecordError from a claim
// or Get, retry class Permanent.
//
// Keys: a record's Redis key is the prefix and the SHA-256 of the key in
// a hash tag ("onceq:{3f0a…}"), so any key of any bytes and length maps
// to one name of fixed size, and Redis Cluster routes every call for a
// record to the one slot that holds it. A Prefix with '{' is refused, as
// its tag would put every record in one slot.
//
// Expiry: each write sets the key to expire Grace after the record's
// ExpiresAt (by the worker's clock); before that an expired record is
// still read, and counted as absent, as in every Store. Grace must exceed
// a claim's skew margin, for which a lease past its expiry still counts
// as held: New refuses a Grace that is not positive, a claim refuses a
// margin that is not under Grace.
//
// Retries and instruments: every call runs through the instruments every
// store has (package storeinstr): retried under WithRetryPolicy while its
// fault is Transient or Throttled, timed and counted
// (db.client.operation.duration, onceq.store.errors, onceq.store.retries,
// with db.system.name redis), told to the hooks and to the retry observer
// of every Consumer over the store (Attach), which slows down on
// throttles, logged and traced. A
// claim or lease script retried after a lost connection, which its first
// attempt may have applied, recognises its own record (the claim's owner;
// the status and version the script writes) and reports success, not a
// conflict.
//
// No business writes and no outbox: Complete and ClaimComplete with
// Writes or outgoing messages (dedup.CompleteRequest.Outbox) return
// dedup.ErrUnsupportedWrite, and a consumer that is to send onward is
// refused over it at start. A handler's effects in other systems are
// therefore not atomic with COMPLETED: a worker that dies between its
// effect and Complete leaves a lease that expires and is claimed again, so
// the effect must be idempotent on its own (a conditional write keyed by
// the message, say).
//
// Limits: a response longer than MaxResponseSize (default
// dedup.DefaultMaxResponseSize, 256 KiB) is refused by Complete and
// ClaimComplete with a *dedup.ResponseTooLargeError, and a nil write with a
// *dedup.NilWriteError, before anything is written. Fail stores its reason
// as dedup.StorableReason makes it (valid UTF-8, at most 1,024 bytes).
//
// Replication: Redis acknowledges a write before its replicas have it. A
// claim or a COMPLETED acknowledged by a primary that fails over before
// replicating it is lost, and the key can be claimed again: a second
// processing window. WithWait narrows it (the write waits for replicas),
// as does appendonly with appendfsync always on the primary; neither makes
// Redis a consensus store.
package redisstore
