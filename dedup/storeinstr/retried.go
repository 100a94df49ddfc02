package storeinstr

import (
	"context"

	"github.com/onceq/onceq/dedup"
)

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

// Claim runs claim, one attempt of a claim by owner that writes status,
// under Do (op is its operation, OpClaim or OpClaimComplete), and answers
// a retried attempt that met its own earlier attempt's record as won
// (ClaimOnRetry).
func (in *Instruments) Claim(ctx context.Context, op, key, owner string, status dedup.Status, claim func(ctx context.Context) (dedup.Claim, error)) (dedup.Claim, error) {
	var c dedup.Claim
	err := in.Do(ctx, op, func(ctx context.Context, attempt int) error {
		var err error
		if c, err = claim(ctx); err != nil {
			return err
		}
		c = ClaimOnRetry(c, attempt > 1, key, owner, status)
		return nil
	})
	if err != nil {
		return dedup.Claim{}, err
	}
	return c, nil
}
