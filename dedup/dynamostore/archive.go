package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup"
)

// WithArchive makes a claim that finds no record consult archive, the
// table of tombstones an Auditor writes for COMPLETED records that TTL
// removed. A tombstone makes the message a duplicate: the claim returns
// its record COMPLETED with no response and dedup.Claim.Archived set, and
// no handler runs. A claim that finds a COMPLETED record past its
// expires_at (the consumer's Retention) that TTL has not removed yet
// answers it the same way without reading the archive: the record is its
// own evidence. So with the archive a key completed once stays a
// duplicate past Retention, until its tombstone expires. Both are counted
// as onceq.dynamodb.ttl_delete_before_retry, by onceq.archive.evidence
// (tombstone, expired_record). Cost: one eventually consistent GetItem
// (0.5 read unit) per new key, and one UpdateItem (1 write unit) per late
// duplicate found. Off by default.
//
// The archive covers completions removed more than a stream's delay ago
// (typically a second): a late duplicate arriving between the TTL delete
// and the tombstone's write is processed again.
func WithArchive(archive string) Option {
	return optionFunc(func(c *config) { c.archive = archive })
}

// tombstone reads key's tombstone from the archive: found when one is
// there and not expired at now (the archive's TTL lags too).
func (s *Store) tombstone(ctx context.Context, op, k string, key map[string]types.AttributeValue, now time.Time) (map[string]types.AttributeValue, bool, error) {
	// Eventually consistent: a tombstone is written long before a late
	// duplicate comes, and this read costs half a strong one.
	in := &ddb.GetItemInput{TableName: s.archive, Key: key}
	client := s.client(k)
	var out *ddb.GetItemOutput
	err := s.do(ctx, op, func(ctx context.Context, _ int) (middleware.Metadata, error) {
		var err error
		out, err = client.GetItem(ctx, in)
		return metadata(out), err
	})
	if err != nil {
		return nil, false, fmt.Errorf("dynamostore: archive table %s: %w", aws.ToString(s.archive), err)
	}
	if len(out.Item) == 0 {
		return nil, false, nil
	}
	exp, err := getN(out.Item, attrExpires, false, 0, maxEpoch)
	if err == nil && exp != 0 && exp < floorUnix(now) {
		return nil, false, nil
	}
	return out.Item, true, nil
}

// fromArchive ends a won claim of a key the archive says completed before:
// the new record is made COMPLETED (archived, no response, until the
// lease's end), and the claim answers it as the live record. Without a
// tombstone the claim stands. An archive that cannot be read fails the
// claim: the lease then holds the key until it expires, rather than the
// message running again unchecked.
func (s *Store) fromArchive(ctx context.Context, c dedup.Claim, a claimArgs, previous *dedup.Record) (dedup.Claim, error) {
	const op = "Claim"
	switch {
	case previous != nil && previous.Status != dedup.StatusCompleted:
		// A FAILED or expired PENDING record: a retry of a key that has
		// not completed.
		return c, nil
	case previous == nil:
		_, found, err := s.tombstone(ctx, op, a.key, a.item, a.now)
		if err != nil {
			return dedup.Claim{}, s.wrap(op, a.key, err)
		}
		if !found {
			return c, nil
		}
	}
	// An expired COMPLETED record the TTL sweeper had not removed yet is
	// its own proof: no read of the archive.
	r := settling(c.Lease, dedup.StatusCompleted, ":completed", time.Unix(a.expires, 0))
	r.Set("#"+attrArchived, r.value(":arch", &types.AttributeValueMemberBOOL{Value: true}))
	r.Remove(nLease, nResponse, nError)
	if err := s.fenced(ctx, op, c.Lease, dedup.StatusCompleted, c.Lease.Version+1, a.item, r, nil); err != nil {
		var lost *LeaseLostError
		if errors.As(err, &lost) && lost.Current != nil {
			// Someone took the key meanwhile (our lease cannot have
			// expired unless the clock jumped): theirs is the record.
			return dedup.Claim{Existing: *lost.Current}, nil
		}
		return dedup.Claim{}, err
	}
	if previous == nil {
		s.tel.lateDuplicate(ctx, evidenceTombstone)
		s.log.InfoContext(ctx, "dynamostore: a key completed before and removed by TTL came again: answered as a duplicate from the archive",
			"key_hash", dedup.KeyHash(a.key))
	} else {
		s.tel.lateDuplicate(ctx, evidenceExpiredRecord)
		s.log.InfoContext(ctx, "dynamostore: a key whose COMPLETED record had expired, and that TTL had not deleted yet, came again: answered as a duplicate",
			"key_hash", dedup.KeyHash(a.key))
	}
	return dedup.Claim{Archived: true, Existing: dedup.Record{
		Key: a.key, Status: dedup.StatusCompleted, Version: c.Lease.Version + 1, Owner: a.owner,
		PayloadHash: a.payloadHash, Attempts: c.Attempt, CreatedAt: time.Unix(floorUnix(a.now), 0), ExpiresAt: time.Unix(a.expires, 0),
	}}, nil
}

// archiveClaimComplete is ClaimComplete's check of the archive, made
// before its write (which may carry business writes that cannot be taken
// back): one GetItem per call. found: a tombstone answers the claim.
func (s *Store) archiveClaimComplete(ctx context.Context, a claimArgs) (dedup.Claim, bool, error) {
	const op = "ClaimComplete"
	item, found, err := s.tombstone(ctx, op, a.key, a.item, a.now)
	if err != nil {
		return dedup.Claim{}, false, s.wrap(op, a.key, err)
	}
	if !found {
		return dedup.Claim{}, false, nil
	}
	owner, _ := getS(item, attrOwner, false)
	ph, _ := getS(item, attrPayload, false)
	if ph == "" {
		ph = a.payloadHash
	}
	exp, _ := getN(item, attrExpires, false, 0, maxEpoch)
	s.tel.lateDuplicate(ctx, evidenceTombstone)
	return dedup.Claim{Archived: true, Existing: dedup.Record{
		Key: a.key, Status: dedup.StatusCompleted, Owner: owner, PayloadHash: ph, ExpiresAt: time.Unix(exp, 0),
	}}, true, nil
}
