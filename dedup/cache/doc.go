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
// cache: a lookup allocates nothing. Measured against maypok86/otter
// v2.4.0 with per-entry expiry (the hit path, 1,000 keys, 2 loaded cores,
// -cpu 1,2, best and worst of 3): hand-written 164-211 ns/op at 1 CPU and
// 91-227 at 2, 0 allocations; otter 482-540 and 251-494 ns/op, 1
// allocation (80 B) per hit. With the body's SHA-256 in the loop (the
// consumer's real hit path) the two are within the noise, 530-1039 ns/op,
// and otter still allocates on every hit.
//
// It imports only package dedup.
package cache
