package pgstore

import (
	"context"
	"time"

	"github.com/onceq/onceq/dedup"
)

// CreateTable creates the Store's table and its expiry index when they do
// not exist (dedup.DefaultTable when table is ""):
//
//	id           bytea PRIMARY KEY  -- the key, see the package doc
//	status       text               -- PENDING, COMPLETED, FAILED
//	version      bigint             -- the fence, +1 per transition
//	owner        text
//	payload_hash text
//	response     bytea
//	attempts     integer
//	last_error   text
//	created_at   timestamptz
//	expires_at   timestamptz        -- indexed, for Cleanup
//	takeovers    integer            -- takeovers of an abandoned lease
//
// Beside it, the offsets table of batch mode (OffsetsTable; see Offsets),
// and the outbox table (OutboxTable), where Complete and ClaimComplete
// keep outgoing messages, with its sequence and indexes.
//
// On a table made by an earlier version it adds what that lacks (the
// takeovers column, 0 in every row, a change of the catalog alone; the
// outbox table), so running it again upgrades the table; earlier workers
// still work on it.
func CreateTable(ctx context.Context, db DB, table string) error {
	if table == "" {
		table = dedup.DefaultTable
	}
	s := &Store{db: db, table: table}
	if err := checkName(table); err != nil {
		return s.wrap("create-table", err)
	}
	q := quote(s.table)
	// The index is named after the table's last part, in the table's schema.
	idx := quote(namesOf(s.table).recordsExpiresIdx)
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+q+` (
	id bytea PRIMARY KEY,
	status text NOT NULL,
	version bigint NOT NULL,
	owner text NOT NULL,
	payload_hash text NOT NULL,
	response bytea,
	attempts integer NOT NULL,
	last_error text NOT NULL,
	created_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	takeovers integer NOT NULL DEFAULT 0
);
ALTER TABLE `+q+` ADD COLUMN IF NOT EXISTS takeovers integer NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS `+idx+` ON `+q+` (expires_at);
`+createOutboxSQL(s.table))
	if err == nil {
		err = createOffsetsTable(ctx, db, table)
	}
	return s.wrap("create-table", err)
}

func lastPart(table string) string {
	for i := len(table) - 1; i >= 0; i-- {
		if table[i] == '.' {
			return table[i+1:]
		}
	}
	return table
}

// DeleteExpired deletes at most limit records that expired before
// before, oldest first, and returns how many. Rows another transaction
// holds are skipped, so concurrent cleaners do not queue on each other.
func (s *Store) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	st, err := s.sql(ctx)
	if err != nil {
		return 0, s.wrap("cleanup", err)
	}
	tag, err := s.db.Exec(ctx, st.deleteSQL, before, limit)
	if err != nil {
		return 0, s.wrap("cleanup", err)
	}
	return int(tag.RowsAffected()), nil
}

// CleanupOptions tune Cleanup; zero fields take the defaults.
type CleanupOptions struct {
	Every time.Duration // pause between sweeps; default 1 minute
	Batch int           // rows per DELETE; default 1000
	// Grace keeps records this long past their expiry, longer than any
	// worker's skew margin, so that a lease its holder still counts as live
	// is never deleted; default 10 minutes.
	Grace time.Duration
}

// Cleanup deletes expired records until ctx is done, in DELETEs of at
// most Batch rows, sweeping again every Every; run it in a goroutine the
// caller owns. It returns ctx's error, or the first failed DELETE's.
func (s *Store) Cleanup(ctx context.Context, o CleanupOptions) error {
	if o.Every <= 0 {
		o.Every = time.Minute
	}
	if o.Batch <= 0 {
		o.Batch = 1000
	}
	if o.Grace <= 0 {
		o.Grace = 10 * time.Minute
	}
	t := time.NewTicker(o.Every)
	defer t.Stop()
	for {
		for {
			n, err := s.DeleteExpired(ctx, time.Now().Add(-o.Grace), o.Batch)
			if err != nil {
				return err
			}
			if n < o.Batch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
