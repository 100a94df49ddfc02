package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/onceq/onceq/dedup"
)

// offsetTable holds the partitions' offset rows of batch mode. Its lock
// is taken after writeMu and before any shard's.
type offsetTable struct {
	mu   sync.Mutex
	rows map[dedup.Partition]dedup.OffsetLease
}

// Offsets returns the Store's batch view, which its Capabilities hand over
// (dedup.Capabilities.Offsets; batch.Store): the offset rows
// of Kafka partitions in batch mode, committed with memstore Writes and
// with Keys claimed as COMPLETED records of this Store, so that a later
// Claim of such a key finds it completed.
func (s *Store) Offsets() dedup.Offsets { return (*batchView)(s) }

// batchView is the Store seen as a dedup.Offsets.
type batchView Store

// Acquire implements dedup.Offsets.
func (o *batchView) Acquire(_ context.Context, p dedup.Partition, member string) (dedup.OffsetLease, error) {
	t := &o.rows
	t.mu.Lock()
	defer t.mu.Unlock()
	row, ok := t.rows[p]
	if !ok {
		row = dedup.OffsetLease{Partition: p, Next: -1}
		if t.rows == nil {
			t.rows = map[dedup.Partition]dedup.OffsetLease{}
		}
	}
	row.Member, row.Token = member, row.Token+1
	t.rows[p] = row
	return row, nil
}

// Offset implements dedup.Offsets.
func (o *batchView) Offset(_ context.Context, p dedup.Partition) (dedup.OffsetLease, error) {
	t := &o.rows
	t.mu.Lock()
	defer t.mu.Unlock()
	row, ok := t.rows[p]
	if !ok {
		return dedup.OffsetLease{}, fmt.Errorf("%w: %s", dedup.ErrNoOffset, p)
	}
	return row, nil
}

// Commit implements dedup.Offsets. Its checks run in this order, and the
// first that fails decides: the commit itself (dedup.OffsetCommit.Check), the
// token (dedup.ErrFenced), From (dedup.ErrOffsetMismatch), the Keys (a
// *dedup.DuplicateKeysError naming every key held by a live record), the
// Writes' own conditions (a *dedup.BusinessConditionError). Only when all
// pass is anything written: the Writes applied, each key's record made
// COMPLETED (owned by the Lease's member, with its payload hash, no
// response, expiring at ExpiresAt), the row's next offset moved.
func (o *batchView) Commit(_ context.Context, c dedup.OffsetCommit) error {
	if err := c.Check(); err != nil {
		return err
	}
	writes, err := asWrites(c.Writes)
	if err != nil {
		return err
	}
	s := (*Store)(o)
	// writeMu serializes this commit with every other commit that carries
	// writes, so that no Check of theirs runs between ours and our Apply.
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	t := &s.rows
	t.mu.Lock()
	defer t.mu.Unlock()
	p := c.Lease.Partition
	row, ok := t.rows[p]
	if !ok || row.Token != c.Lease.Token {
		return fmt.Errorf("%w: %s token %d, stored %d", dedup.ErrFenced, p, c.Lease.Token, row.Token)
	}
	if row.Next != -1 && row.Next != c.From {
		return fmt.Errorf("%w: %s commit from %d, stored next %d", dedup.ErrOffsetMismatch, p, c.From, row.Next)
	}
	unlock := s.lockKeys(c.Keys)
	defer unlock()
	var dup []int
	for i, k := range c.Keys {
		h, sh := s.locate(k)
		if held(sh.findLocked(h, k), c.Now, 0) {
			dup = append(dup, i)
		}
	}
	if dup != nil {
		return &dedup.DuplicateKeysError{Indexes: dup}
	}
	if err := applyWrites(writes); err != nil {
		return err
	}
	for i, k := range c.Keys {
		h, sh := s.locate(k)
		sh.claimLocked(h, sh.findLocked(h, k), k, c.Lease.Member, c.PayloadHash(i), dedup.StatusCompleted, c.Now, c.ExpiresAt)
	}
	row.Next = c.Next
	t.rows[p] = row
	return nil
}

// lockKeys locks the shards of keys, each once, in shard order (every
// other path holds one shard at a time, so the order rules out a
// deadlock), and returns what unlocks them.
func (s *Store) lockKeys(keys []string) func() {
	if len(keys) == 0 {
		return func() {}
	}
	idx := make([]int, 0, len(keys))
	for _, k := range keys {
		idx = append(idx, int(s.hash(k)%shards))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		s.shards[i].mu.Lock()
	}
	return func() {
		for _, i := range idx {
			s.shards[i].mu.Unlock()
		}
	}
}
