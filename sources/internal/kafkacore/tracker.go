package kafkacore

import (
	"slices"
	"time"
)

// Tracker follows one partition's delivered offsets and which are done, so
// that the offset committed is always one below which every delivered
// message is done. Completion may come in any order; commits only move
// forward. Offsets need not be contiguous (compaction, transaction markers
// leave gaps): what was never delivered cannot be unfinished.
//
// A Tracker is not safe for concurrent use; the source guards it.
type Tracker struct {
	committed int64       // offset the group has committed; -1 if none known
	last      int64       // highest offset added; -1 if none
	offs      []int64     // delivered, from the oldest not yet known contiguous-done
	done      []bool      // parallel to offs
	at        []time.Time // parallel to offs: when each was delivered
	head      int         // offs[:head] are done and contiguous: dropped lazily
	open      int         // added and not done
}

func NewTracker(committed int64) *Tracker {
	if committed < 0 {
		committed = -1
	}
	return &Tracker{committed: committed, last: -1}
}

// Add records that offset was delivered. Offsets must rise; one that does
// not (a refetch) is refused, so a message is never tracked twice.
func (t *Tracker) Add(offset int64) bool { return t.AddAt(offset, time.Time{}) }

// AddAt is Add, recording that the offset was delivered at at: the age of
// the oldest unfinished offset is how long the commit has been held.
func (t *Tracker) AddAt(offset int64, at time.Time) bool {
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
	t.at = append(t.at, at)
	t.open++
	return true
}

// MarkDone records that offset is done. It reports false when offset is not
// tracked or was done already.
func (t *Tracker) MarkDone(offset int64) bool {
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
		copy(t.at, t.at[t.head:])
		t.offs, t.done, t.at, t.head = t.offs[:n], t.done[:n], t.at[:n], 0
	}
	return true
}

// Frontier is the offset to commit now: the lowest unfinished delivered
// offset, or one past the last delivered when all are done. -1 when
// nothing was delivered and nothing is known committed.
func (t *Tracker) Frontier() int64 {
	if t.head < len(t.offs) {
		return t.offs[t.head]
	}
	if t.last >= 0 {
		return t.last + 1
	}
	return t.committed
}

// Oldest is the lowest unfinished offset, which holds the commit, and
// when it was delivered; ok is false when none is unfinished.
func (t *Tracker) Oldest() (offset int64, since time.Time, ok bool) {
	if t.head < len(t.offs) {
		return t.offs[t.head], t.at[t.head], true
	}
	return 0, time.Time{}, false
}

// ToCommit returns the offset worth committing: the frontier, when it is
// ahead of what is committed.
func (t *Tracker) ToCommit() (int64, bool) {
	f := t.Frontier()
	return f, f > t.committed
}

// CommittedAt records a successful commit. It never moves backwards, so a
// slow commit answered after a newer one cannot undo it.
func (t *Tracker) CommittedAt(offset int64) {
	if offset > t.committed {
		t.committed = offset
	}
}

// Unfinished counts delivered offsets not yet done.
func (t *Tracker) Unfinished() int { return t.open }

// Lag is the partition's commit lag: the log end (hwm, or one past the
// highest offset delivered when that is further) minus the committed
// offset. ok is false when nothing was fetched and nothing is known
// committed.
func (t *Tracker) Lag(hwm int64) (lag int64, ok bool) {
	end := max(hwm, t.last+1)
	if t.committed < 0 || end <= 0 {
		return 0, false
	}
	return max(end-t.committed, 0), true
}
