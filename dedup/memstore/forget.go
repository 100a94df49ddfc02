package memstore

import (
	"context"
	"fmt"

	"github.com/onceq/onceq/dedup"
)

var _ dedup.Forgetter = (*Store)(nil)

// Forget implements dedup.Forgetter.
func (s *Store) Forget(_ context.Context, key string, version int64) error {
	h, sh := s.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var prev *entry
	for e := sh.records[h]; e != nil; prev, e = e, e.next {
		if e.rec.Key != key {
			continue
		}
		if e.rec.Version != version {
			return fmt.Errorf("memstore: forget key_hash %s: %w: version %d, not %d", dedup.KeyHash(key), dedup.ErrRecordChanged, e.rec.Version, version)
		}
		switch {
		case prev != nil:
			prev.next = e.next
		case e.next != nil:
			sh.records[h] = e.next
		default:
			delete(sh.records, h)
		}
		sh.n--
		return nil
	}
	return fmt.Errorf("memstore: forget key_hash %s: %w", dedup.KeyHash(key), dedup.ErrNotFound)
}
