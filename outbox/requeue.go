package outbox

import (
	"context"
	"errors"
	"time"
)

// Requeuer puts a Dead entry back to Pending, for an operator's redrive:
// a method of every Store. The entry keeps its ID, so that an onceq consumer downstream
// absorbs a copy that had in fact arrived.
type Requeuer interface {
	// Requeue moves e, Dead at e.Lease.Version as Entries listed it, back
	// to Pending, leasable from now at the place
	// its Seq gives it in its lane: one version on, with no owner, no
	// attempts and no releases counted, reason as its LastError. An entry
	// not Dead at that version (absent, another redrive's, another
	// state) is refused with an error wrapping ErrEntryChanged, and
	// nothing is written.
	Requeue(ctx context.Context, e Entry, reason string, now time.Time) error
}

// ErrEntryChanged is a Requeue refused because the entry is no longer as
// it was listed.
var ErrEntryChanged = errors.New("outbox: the entry changed since it was listed")
