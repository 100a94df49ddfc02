package kafkacore

import (
	"math/rand/v2"
	"testing"
)

func TestTrackerContiguous(t *testing.T) {
	tr := NewTracker(10)
	for _, off := range []int64{10, 11, 12, 14, 15} { // 13 compacted away
		if !tr.Add(off) {
			t.Fatalf("add %d refused", off)
		}
	}
	if tr.Add(12) || tr.Add(9) {
		t.Fatal("a refetched offset was tracked twice")
	}
	if _, ok := tr.ToCommit(); ok {
		t.Fatal("nothing done, yet something to commit")
	}
	steps := []struct {
		done int64
		want int64
	}{{11, 10}, {14, 10}, {10, 12}, {15, 12}, {12, 16}}
	for _, st := range steps {
		if !tr.MarkDone(st.done) {
			t.Fatalf("markDone(%d) refused", st.done)
		}
		if got := tr.Frontier(); got != st.want {
			t.Fatalf("after done %d: frontier %d, want %d", st.done, got, st.want)
		}
	}
	if tr.MarkDone(12) || tr.MarkDone(13) {
		t.Fatal("markDone accepted a done or unknown offset")
	}
	off, ok := tr.ToCommit()
	if !ok || off != 16 {
		t.Fatalf("toCommit = %d %v, want 16", off, ok)
	}
	tr.CommittedAt(16)
	tr.CommittedAt(12) // a slow, older commit answered late
	if tr.committed != 16 {
		t.Fatalf("committed moved back to %d", tr.committed)
	}
	if _, ok := tr.ToCommit(); ok {
		t.Fatal("committed offset offered again")
	}
}

func TestTrackerNoCommittedOffset(t *testing.T) {
	tr := NewTracker(-2) // kgo.FirstOffset: the group never committed
	if _, ok := tr.ToCommit(); ok {
		t.Fatal("empty tracker offered a commit")
	}
	tr.Add(5)
	tr.MarkDone(5)
	if off, ok := tr.ToCommit(); !ok || off != 6 {
		t.Fatalf("toCommit = %d %v, want 6", off, ok)
	}
}

// TestTrackerProperty: whatever the order of completions, and with commits
// taken at random moments, a commit never passes an unfinished offset and
// never goes backwards; once all is done it reaches one past the last.
func TestTrackerProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(20240917, 1))
	for iter := range 3000 {
		start := int64(rng.IntN(1000))
		tr := NewTracker(start)
		// Offsets with occasional gaps, as compaction leaves them.
		n := 1 + rng.IntN(300)
		offs := make([]int64, 0, n)
		next := start
		for range n {
			if rng.IntN(8) == 0 {
				next += int64(1 + rng.IntN(5))
			}
			offs = append(offs, next)
			next++
		}
		done := map[int64]bool{}
		added := 0
		pending := []int64{} // added, not yet done
		lastCommit := tr.committed
		check := func(stage string) {
			off, ok := tr.ToCommit()
			if !ok {
				return
			}
			if off < lastCommit {
				t.Fatalf("iter %d %s: commit %d behind %d", iter, stage, off, lastCommit)
			}
			for _, o := range offs[:added] {
				if o < off && !done[o] {
					t.Fatalf("iter %d %s: commit %d passes unfinished %d", iter, stage, off, o)
				}
			}
			if rng.IntN(3) == 0 {
				tr.CommittedAt(off)
				lastCommit = off
			}
		}
		for added < len(offs) || len(pending) > 0 {
			// Deliver a few, finish a random one, interleaved like a
			// bounded fetch loop and a worker pool.
			if added < len(offs) && (len(pending) == 0 || rng.IntN(2) == 0) {
				if !tr.Add(offs[added]) {
					t.Fatalf("iter %d: add %d refused", iter, offs[added])
				}
				pending = append(pending, offs[added])
				added++
				check("after add")
				continue
			}
			i := rng.IntN(len(pending))
			o := pending[i]
			pending[i] = pending[len(pending)-1]
			pending = pending[:len(pending)-1]
			if !tr.MarkDone(o) {
				t.Fatalf("iter %d: markDone %d refused", iter, o)
			}
			done[o] = true
			if tr.Unfinished() != len(pending) {
				t.Fatalf("iter %d: unfinished %d, want %d", iter, tr.Unfinished(), len(pending))
			}
			check("after done")
		}
		if off, _ := tr.ToCommit(); off != offs[len(offs)-1]+1 && lastCommit != offs[len(offs)-1]+1 {
			t.Fatalf("iter %d: all done, commit %d, want %d", iter, off, offs[len(offs)-1]+1)
		}
	}
}
