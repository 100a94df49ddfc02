package pgstore

import (
	"context"
	"fmt"

	"github.com/onceq/onceq/dedup"
)

var _ dedup.Forgetter = (*Store)(nil)

// Forget implements dedup.Forgetter, in one statement: the row deleted
// if its version is still version, and what the row was before, which
// tells an absent record from one that moved on. It needs the DELETE
// privilege on the table, as Cleanup does.
func (s *Store) Forget(ctx context.Context, key string, version int64) error {
	st, err := s.sql(ctx)
	if err != nil {
		return s.wrap("forget", err)
	}
	q := `WITH gone AS (DELETE FROM ` + st.records + ` WHERE id = $1 AND version = $2 RETURNING 1)
SELECT (SELECT count(*) FROM gone), (SELECT version FROM ` + st.records + ` WHERE id = $1)`
	var gone int64
	var was *int64
	if err := s.db.QueryRow(ctx, q, rowID(key), version).Scan(&gone, &was); err != nil {
		return s.wrap("forget", err)
	}
	switch {
	case gone > 0:
		return nil
	case was == nil:
		return fmt.Errorf("pgstore: forget key_hash %s: %w", dedup.KeyHash(key), dedup.ErrNotFound)
	}
	return fmt.Errorf("pgstore: forget key_hash %s: %w: version %d, not %d", dedup.KeyHash(key), dedup.ErrRecordChanged, *was, version)
}
