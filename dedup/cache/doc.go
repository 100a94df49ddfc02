// Package cache keeps COMPLETED records in process memory in front of any
// dedup.Store, so that a duplicate of a key this worker has already seen
// completed costs no store call.
//
// COMPLETED is terminal until the record's ExpiresAt for onceq's own
// workers, but not for an operator, who may delete or rewrite a record
// (and another worker then re-claim it). So an entry answers for at most
// MaxAge after it was cached (DefaultMaxAge, 10 s), and never past its
// record's expiry: that is how long the cache can disagree with the
// store. PENDING and FAILED records, which change, are never cached. An
// entry is found only by the key it was cached under, the caller's, never
// by the form a Store holds it in (a hashed long key).
//
// Cache is the cache itself: Get and Put by key, bounded by entries and
// bytes. A Consumer or Guard keeps one beside its Store and fills it with
// what it completes. Wrap puts one in front of a dedup.Store for a program
// that uses a Store without the consumer.
//
// The shards and CLOCK eviction are hand-written rather than a general
// cache: a lookup allocates nothing, where maypok86/otter with per-entry
// expiry allocates on every hit and is no faster. The consumer's
// BenchmarkCachedDuplicates keeps the hit path; the comparison's figures
// are in BENCHMARKS.md.
//
// It imports only package dedup.
package cache
