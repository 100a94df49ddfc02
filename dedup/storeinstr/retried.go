package storeinstr

import "github.com/onceq/onceq/dedup"

// A conditional write retried after an ambiguous failure (a connection
// lost after the request was sent) may meet what its own earlier attempt
// committed unseen. These tell that record from another writer's, so that
// a retry never reports its own success as a conflict; owner tokens are
// unique to a claim, so a record with the caller's owner is its own.

// ClaimOnRetry is the answer of a claim that met c's Existing record on a
// retried attempt: the claim's own, written as status by owner, is the
// won claim its first attempt made (its Previous and takeovers unknown);
// any other c stands.
func ClaimOnRetry(c dedup.Claim, retried bool, key, owner string, status dedup.Status) dedup.Claim {
	if !retried || c.Acquired || c.Existing.Owner != owner || c.Existing.Status != status {
		return c
	}
	return dedup.Claim{Acquired: true, Lease: dedup.Lease{Key: key, Owner: owner, Version: c.Existing.Version},
		Attempt: c.Existing.Attempts + 1, Takeovers: c.Existing.Takeovers}
}

// SettledOnRetry reports whether cur, the record found after a fenced
// update of lease l lost its fence on a retried attempt, is what that
// update writes: status done, by l's owner, one version on. The update's
// earlier attempt committed, and the call succeeded.
func SettledOnRetry(cur dedup.Record, retried bool, l dedup.Lease, done dedup.Status) bool {
	return retried && cur.Owner == l.Owner && cur.Status == done && cur.Version == l.Version+1
}
