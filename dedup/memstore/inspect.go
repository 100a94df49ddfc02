package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/outbox"
)

var _ dedup.Inspector = (*Store)(nil)

// each calls f with every record held, a shard at a time under its lock,
// until f returns false.
func (s *Store) each(f func(r *dedup.Record) bool) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, head := range sh.records {
			for e := head; e != nil; e = e.next {
				if !f(&e.rec) {
					sh.mu.Unlock()
					return
				}
			}
		}
		sh.mu.Unlock()
	}
}

// FindKeyHash implements dedup.Inspector, reading at most limit records.
func (s *Store) FindKeyHash(_ context.Context, keyHash string, limit int) (dedup.KeyHashSearch, error) {
	res := dedup.KeyHashSearch{Unit: "record", Exhausted: true}
	if len(keyHash) != len(dedup.KeyHash("k")) || strings.Trim(keyHash, "0123456789abcdef") != "" {
		return res, fmt.Errorf("memstore: key hash %q, want 12 lowercase hex digits", keyHash)
	}
	if limit < 1 {
		return res, fmt.Errorf("memstore: scan limit %d, want at least 1", limit)
	}
	s.each(func(r *dedup.Record) bool {
		if res.Scanned == limit {
			res.Exhausted = false
			return false
		}
		res.Scanned++
		if dedup.KeyHash(r.Key) == keyHash {
			res.Records = append(res.Records, *clone(r))
		}
		return true
	})
	return res, nil
}

// List implements dedup.Inspector: the records f selects, oldest first.
func (s *Store) List(_ context.Context, f dedup.ListFilter) ([]dedup.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var out []dedup.Record
	s.each(func(r *dedup.Record) bool {
		if f.Selects(*r) {
			out = append(out, *clone(r))
		}
		return true
	})
	slices.SortFunc(out, func(a, b dedup.Record) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out[:min(len(out), f.Limit)], nil
}

// OutboxEntries implements dedup.Inspector.
func (s *Store) OutboxEntries(ctx context.Context, state outbox.State, limit int) ([]outbox.Entry, error) {
	return s.Outbox().Entries(ctx, state, limit)
}
