package outbox

import (
	"context"
	"errors"
)

// Pager lists a Store's entries a page at a time, each page read from
// where the one before ended, so that going through them all reads the
// store once: for a store whose Entries reads the whole outbox on every
// call (DynamoDB's scans its table), an operator's pass over the Dead
// entries (onceq redrive) is one read of it, not one per batch.
type Pager interface {
	// EntriesPage lists the entries in state (all when "") of one page,
	// the one after cursor ("": the first), and returns the cursor of the
	// page after it ("": it was the last). A page reads at most limit
	// entries, of any state (limit <= 0: as many as the store reads in
	// one request); it may list none of state and still have a next
	// page. The pages list the entries in no set order; an entry in
	// state through the pass is listed once, one that changes state
	// meanwhile may be listed or not. A cursor that cannot be one the
	// store returned (not of its form) is refused with an error wrapping
	// ErrBadCursor; one of its form lists from where it points.
	EntriesPage(ctx context.Context, state State, cursor string, limit int) (entries []Entry, next string, err error)
}

// ErrBadCursor is a cursor that cannot be one EntriesPage returned.
var ErrBadCursor = errors.New("outbox: the cursor is not one the store's EntriesPage returns")
