package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storeinstr"
)

var _ dedup.Resetter = (*Store)(nil)

// Reset implements dedup.Resetter: a GET, then the record written by the
// takeover script only while it is still the one read. A retried Reset
// whose earlier attempt wrote unseen finds the record as it leaves it,
// and succeeds.
func (s *Store) Reset(ctx context.Context, req dedup.ResetRequest) error {
	reason := dedup.StorableReason(req.Reason)
	rk := s.redisKey(req.Key)
	var answer error
	err := s.instr.Do(ctx, storeinstr.OpReset, func(ctx context.Context, attempt int) error {
		answer = nil
		old, err := s.c.Get(ctx, rk).Result()
		if errors.Is(err, redis.Nil) {
			answer = changed(req)
			return nil
		}
		if err != nil {
			return s.wrap("reset", err)
		}
		rec, read := decode(req.Key, old)
		if read != nil {
			answer = read // a corrupt record
			return nil
		}
		cur := *rec
		if attempt > 1 && cur.Status == dedup.StatusFailed && cur.Version == req.Version+1 && cur.Attempts == 0 && cur.LastError == reason {
			return nil // our earlier attempt
		}
		if cur.Version != req.Version || !dedup.Resettable(cur, req.Now) {
			answer = changed(req)
			return nil
		}
		next := cur
		next.Status, next.Version, next.LastError, next.ExpiresAt = dedup.StatusFailed, cur.Version+1, reason, req.Now
		next.Attempts, next.Takeovers = 0, 0
		val, err := encode(&next)
		if err != nil {
			return err
		}
		n, err := s.script(ctx, s.takeover, rk, old, val, s.expireAt(req.Now)).Int()
		if err != nil {
			return s.wrap("reset", err)
		}
		if n == 0 {
			answer = changed(req)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return answer
}

func changed(req dedup.ResetRequest) error {
	return fmt.Errorf("redisstore: reset: %w: key_hash %s version %d", dedup.ErrRecordChanged, dedup.KeyHash(req.Key), req.Version)
}
