// Package cache keeps COMPLETED records in process memory in front of any
// dedup.Store, so that a duplicate of a key this worker has already seen
// completed costs no store call.
//
// It is safe because COMPLETED is terminal until the record's ExpiresAt:
// no transition can change such a record before then, and every entry
// expires no later than its record. PENDING and FAILED records, which
// change, are never cached.
//
// It imports only package dedup; the consumer puts it in front of the
// Store it is given.
package cache
