package kafka

import "slices"

// tracker follows one partition's delivered offsets and which are done, so
// that the offset committed is always one below which every delivered
// message is done. Completion may come in any order; commits only move
// forward. Offsets need not be contiguous (compaction, transaction markers
// leave gaps): what was never delivered cannot be unfinished.
//
// A tracker is not safe for concurrent use; the source guards it.
type tracker struct {
	committed int64   // offset the group has committed; -1 if none known
	last      int64   // highest offset added; -1 if none
	offs      []int64 // delivered, from the oldest not yet known contiguous-done
	done      []bool  // parallel to offs
	head      int     // offs[:head] are done and contiguous: dropped lazily
	open      int     // added and not done
}

func newTracker(committed int64) *tracker {
	if committed < 0 {
		committed = -1
	}
	return &tracker{committed: committed, last: -1}
}

// add records that offset was delivered. Offsets must rise; one that does
// not (a refetch) is refused, so a message is never tracked twice.
func (t *tracker) add(offset int64) bool {
	if offset <= t.last || offset < t.committed {
		return false
	}
	if t.committed < 0 {
		// No commit yet: the group would resume here anyway, so there is
		// nothing to commit until this offset is done.
		t.committed = offset
	}
	t.last = offset
	t.offs = append(t.offs, offset)
	t.done = append(t.done, false)
	t.open++
	return true
}

// markDone records that offset is done. It reports false when offset is not
// tracked or was done already.
func (t *tracker) markDone(offset int64) bool {
	live := t.offs[t.head:]
	i, ok := slices.BinarySearch(live, offset)
	if !ok || t.done[t.head+i] {
		return false
	}
	t.done[t.head+i] = true
	t.open--
	for t.head < len(t.offs) && t.done[t.head] {
		t.head++
	}
	// Compact once the dropped prefix dominates, so memory follows the
	// number of unfinished messages, not the partition's history.
	if t.head > 64 && t.head*2 > len(t.offs) {
		n := copy(t.offs, t.offs[t.head:])
		copy(t.done, t.done[t.head:])
		t.offs, t.done, t.head = t.offs[:n], t.done[:n], 0
	}
	return true
}

// frontier is the offset to commit now: the lowest unfinished delivered
// offset, or one past the last delivered when all are done. -1 when
// nothing was delivered and nothing is known committed.
func (t *tracker) frontier() int64 {
	if t.head < len(t.offs) {
		return t.offs[t.head]
	}
	if t.last >= 0 {
		return t.last + 1
	}
	return t.committed
}

// toCommit returns the offset worth committing: the frontier, when it is
// ahead of what is committed.
func (t *tracker) toCommit() (int64, bool) {
	f := t.frontier()
	return f, f > t.committed
}

// committedAt records a successful commit. It never moves backwards, so a
// slow commit answered after a newer one cannot undo it.
func (t *tracker) committedAt(offset int64) {
	if offset > t.committed {
		t.committed = offset
	}
}

// unfinished counts delivered offsets not yet done.
func (t *tracker) unfinished() int { return t.open }
