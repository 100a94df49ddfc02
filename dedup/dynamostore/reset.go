package dynamostore

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup"
)

var _ dedup.Resetter = (*Store)(nil)

// Reset implements dedup.Resetter: one conditional UpdateItem. A retried
// Reset whose first attempt committed unseen finds the record as it
// leaves it, and succeeds.
func (s *Store) Reset(ctx context.Context, req dedup.ResetRequest) error {
	const op = "Reset"
	key, err := s.layout.key(req.Key)
	if err != nil {
		return err
	}
	reason := dedup.StorableReason(req.Reason)
	r := newRequest()
	r.Set(nStatus, r.value(":failed", str(string(dedup.StatusFailed))))
	r.Set(nVersion, r.value(":v1", num(req.Version+1)))
	r.Set(nExpires, r.value(":exp", num(ceilUnix(req.Now))))
	r.Set(nError, r.value(":err", str(reason)))
	r.Set(nAttempts, r.value(":zero", num(0)))
	r.Remove(nTakeover, nLease)
	// What dedup.Resettable takes, at the version read; an expiry in
	// whole seconds is past once below the second now is in, as a claim
	// compares it.
	r.Where(r.name(nVersion), " = ", r.value(":v", num(req.Version)), " AND (",
		r.name(nStatus), " IN (", ":failed", ", ", r.value(":dead", str(string(dedup.StatusDeadLetter))), ") OR (",
		r.name(nStatus), " = ", r.value(":pending", str(string(dedup.StatusPending))), " AND ",
		r.name(nExpires), " < ", r.value(":now", num(floorUnix(req.Now))), "))")
	in := r.updateItem(s.tableName, key, types.ReturnValueNone)
	client := s.client(req.Key)
	retried := false
	err = s.do(ctx, op, func(ctx context.Context, attempt int) (middleware.Metadata, error) {
		retried = attempt > 1
		o, err := client.UpdateItem(ctx, in)
		return metadata(o), err
	})
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return s.wrap(op, req.Key, s.refused(ctx, op, req.Key, in, err))
	}
	if retried && len(ccf.Item) > 0 {
		if cur, err := decodeRecord(ccf.Item); err == nil && cur.Status == dedup.StatusFailed &&
			cur.Version == req.Version+1 && cur.Attempts == 0 && cur.LastError == reason {
			return nil
		}
	}
	return fmt.Errorf("dynamostore: reset: %w: key_hash %s version %d", dedup.ErrRecordChanged, dedup.KeyHash(req.Key), req.Version)
}
