package history

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/onceq/onceq/examples/storehistory"
)

// Batch mode's history is every call on the partitions' offset rows
// (storehistory.Offsets): Acquire, Commit and Offset. Each partition's
// row is checked against its model: a token that every Acquire raises
// and that fences every Commit, and a next offset that a Commit moves
// only from its own From (each offset committed once, in order). Beside
// the verdict, the anomalies a row's history can show are counted from
// the commits that surely took effect: gaps, overlaps, batches committed
// twice, a token going down, commits that a newer token should have
// fenced, and offsets below the log's end never committed.

// OffsetHistory is the offset-row calls of one or more processes, by
// partition, and the log end offsets the partitions must reach.
type OffsetHistory struct {
	parts     map[string][]*op
	ends      map[string]int64
	processes int
}

// NewOffsets returns an empty OffsetHistory.
func NewOffsets() *OffsetHistory {
	return &OffsetHistory{parts: map[string][]*op{}, ends: map[string]int64{}}
}

// LoadOffsetFiles reads the offset-row histories of paths, each one
// process's.
func LoadOffsetFiles(paths ...string) (*OffsetHistory, error) {
	h := NewOffsets()
	if err := loadFiles(h.Add, paths); err != nil {
		return nil, err
	}
	return h, nil
}

// Add reads one process's history. A last line cut short (the process was
// killed while writing it) is dropped; any other line that is not an
// offset-row event is an error.
func (h *OffsetHistory) Add(r io.Reader) error {
	proc := h.processes
	h.processes++
	calls := map[int64]*op{}
	return readEvents(r, func(n int, e storehistory.Event) error {
		switch {
		case e.Kind == storehistory.KindCall && (e.Op == storehistory.OpAcquire || e.Op == storehistory.OpCommit || e.Op == storehistory.OpOffset):
			h.parts[e.Key] = append(h.parts[e.Key], openCall(calls, proc, e))
		case e.Kind == storehistory.KindReturn:
			return closeCall(calls, n, e)
		default:
			return fmt.Errorf("%w: line %d: %s %q is no offset-row event", ErrMalformed, n, e.Kind, e.Op)
		}
		return nil
	})
}

// SetEnd records partition's log end offset: every offset before it must
// have been committed (the run drained its records).
func (h *OffsetHistory) SetEnd(partition string, end int64) { h.ends[partition] = end }

// Partitions returns the partitions with a call or an end, sorted.
func (h *OffsetHistory) Partitions() []string {
	seen := map[string]bool{}
	for p := range h.parts {
		seen[p] = true
	}
	for p := range h.ends {
		seen[p] = true
	}
	ps := make([]string, 0, len(seen))
	for p := range seen {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// OffsetReport is what CheckOffsets found.
type OffsetReport struct {
	Partitions int
	Ops        int // offset-row calls
	Unknown    int // calls whose outcome is unknown (an error, or no return)
	Commits    int // commits that surely took effect
	// RefusedFenced and RefusedMismatch count the commits refused for a
	// token taken over (a zombie's) and for a stale next offset: the
	// fence at work.
	RefusedFenced, RefusedMismatch int

	// Illegal counts the partitions whose history no order of their calls
	// explains; Violation describes the first. TimedOut counts those left
	// undecided after the timeout.
	Illegal   int
	Violation string
	TimedOut  int

	// The anomalies, counted from the commits that surely took effect
	// (and unknown ones only where they close a gap). In offsets: Gaps,
	// offsets between two commits that no commit covers; Overlaps,
	// offsets two different commits both covered; Doubled, offsets of
	// batches committed twice (the same From and Next); Uncommitted,
	// offsets below the log's end past the last one stored. In calls:
	// TokenDown, a commit under a lower token than the commit before it,
	// or an Acquire that returned no higher token than one that returned
	// before it began; FencedCommits, commits that took effect although an
	// Acquire had surely returned a higher token before they began;
	// OutOfOrder, a commit that surely returned before the commit of the
	// offsets before it began.
	Gaps, Overlaps, Doubled, TokenDown, FencedCommits, OutOfOrder, Uncommitted int

	Took time.Duration
}

// Verdict is "linearizable", "not linearizable: …" naming the violation,
// or "unknown: …" when partitions were left undecided and none was
// illegal.
func (r OffsetReport) Verdict() string {
	return verdict(r.Illegal, r.TimedOut, r.Violation, "partitions")
}

// Lost is the offsets never committed: the gaps and those below the end.
func (r OffsetReport) Lost() int { return r.Gaps + r.Uncommitted }

// Anomalies is the sum of the anomaly counts.
func (r OffsetReport) Anomalies() int {
	return r.Gaps + r.Overlaps + r.Doubled + r.TokenDown + r.FencedCommits + r.OutOfOrder + r.Uncommitted
}

// OK reports whether no partition was illegal and no anomaly was found.
func (r OffsetReport) OK() bool { return r.Illegal == 0 && r.Anomalies() == 0 }

// Line is the report on one line, the verdict last.
func (r OffsetReport) Line() string {
	return fmt.Sprintf("history: offsets: partitions=%d ops=%d unknown=%d commits=%d refused_fenced=%d refused_mismatch=%d lost=%d doubled=%d gaps=%d overlaps=%d token_down=%d fenced_commits=%d out_of_order=%d uncommitted=%d checked_in=%s verdict: %s",
		r.Partitions, r.Ops, r.Unknown, r.Commits, r.RefusedFenced, r.RefusedMismatch, r.Lost(), r.Doubled+r.Overlaps, r.Gaps, r.Overlaps, r.TokenDown, r.FencedCommits, r.OutOfOrder, r.Uncommitted,
		r.Took.Round(time.Millisecond), r.Verdict())
}

// CheckOffsets checks every partition's offset-row history for
// linearizability against the row's model and counts the anomalies.
// Partitions are checked one after another: each is one row's calls,
// mostly made one at a time by its owner.
func CheckOffsets(h *OffsetHistory, o Options) OffsetReport {
	start := time.Now()
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Budget <= 0 {
		o.Budget = 5 * time.Minute
	}
	deadline := start.Add(o.Budget)
	var r OffsetReport
	for _, p := range h.Partitions() {
		r.Partitions++
		ops := h.parts[p]
		end, hasEnd := h.ends[p]
		if !hasEnd {
			end = -1
		}
		offsetAnomalies(ops, end, &r)
		var pops []porcupine.Operation
		for _, c := range ops {
			r.Ops++
			if c.unknown() {
				r.Unknown++
				if c.in.Op == storehistory.OpOffset {
					continue // a read that saw nothing tells nothing
				}
			}
			pops = append(pops, c.operation())
		}
		timeout := min(o.Timeout, time.Until(deadline))
		if timeout <= 0 {
			r.TimedOut++
			continue
		}
		m := offsetModel()
		switch porcupine.CheckOperationsTimeout(m, pops, timeout) {
		case porcupine.Illegal:
			if r.Illegal == 0 {
				r.Violation = "partition " + p + ": " + violationOf(m, pops, timeout)
			}
			r.Illegal++
		case porcupine.Unknown:
			r.TimedOut++
		}
	}
	r.Took = time.Since(start)
	return r
}

// violationOf names the first call (by call time) that no partial
// linearization of ops could take, the last calls before it, and the row
// they reached.
func violationOf(m porcupine.Model, ops []porcupine.Operation, timeout time.Duration) string {
	if d, ok := describeViolation(m, ops, timeout, 3, "row"); ok {
		return d
	}
	return "no order of its calls explains it"
}

// row is one partition's offset row in the model. A token raised by an
// Acquire whose outcome is unknown is known only to exceed token (exact
// false) until an Acquire or a read returns the row.
type row struct {
	present bool
	token   int64
	exact   bool
	next    int64
}

func (s row) String() string {
	switch {
	case !s.present:
		return "absent"
	case !s.exact:
		return fmt.Sprintf("token >%d next %d", s.token, s.next)
	}
	return fmt.Sprintf("token %d next %d", s.token, s.next)
}

// raisedTo reports whether t is a legal new token for s.
func (s row) raisedTo(t int64) bool { return !s.present || t > s.token }

// commits reports whether a Commit under token t from offset f takes s.
func (s row) commits(t, f int64) bool {
	return s.present && s.exact && s.token == t && (s.next == f || s.next == -1)
}

// offsetModel is the offset row's sequential specification,
// nondeterministic where a call's outcome is unknown (taken effect or
// not).
func offsetModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{row{}} },
		Step: func(st, input, output any) []any {
			next := rowStep(st.(row), input.(storehistory.Event), output.(storehistory.Event))
			out := make([]any, len(next))
			for i, s := range next {
				out[i] = s
			}
			return out
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(storehistory.Event), output.(storehistory.Event)
			res := out.Outcome
			if res == "" {
				res = storehistory.OutcomeUnknown
			}
			switch in.Op {
			case storehistory.OpCommit:
				if out.Refusal != "" {
					res += " " + out.Refusal
				}
				return fmt.Sprintf("commit [%d,%d) token %d: %s", in.From, in.Next, in.Token, res)
			case storehistory.OpAcquire:
				return fmt.Sprintf("acquire: %s token %d next %d", res, out.Token, out.Next)
			}
			return fmt.Sprintf("read: %s token %d next %d", res, out.Token, out.Next)
		},
		DescribeState: func(st any) string { return st.(row).String() },
	}
	return nm.ToModel()
}

// rowStep returns the states s can move to by the call in returning out;
// none when it cannot.
func rowStep(s row, in, out storehistory.Event) []row {
	unknown := out.Outcome == "" || out.Outcome == storehistory.OutcomeUnknown
	switch in.Op {
	case storehistory.OpAcquire:
		if unknown {
			// Raised to a token no member holds, or not at all.
			raised := s
			raised.present, raised.exact = true, false
			if !s.present {
				raised.next = -1
			}
			return []row{s, raised}
		}
		if out.Outcome != storehistory.OutcomeOK || !s.raisedTo(out.Token) {
			return nil
		}
		if (s.present && out.Next != s.next) || (!s.present && out.Next != -1) {
			return nil
		}
		return []row{{present: true, token: out.Token, exact: true, next: out.Next}}
	case storehistory.OpCommit:
		moved := s
		moved.next = in.Next
		switch {
		case unknown:
			if s.commits(in.Token, in.From) {
				return []row{s, moved}
			}
			return []row{s}
		case out.Outcome == storehistory.OutcomeOK:
			if s.commits(in.Token, in.From) {
				return []row{moved}
			}
			return nil
		case out.Refusal == storehistory.RefusalFenced:
			if !s.present || !s.exact || s.token != in.Token {
				return []row{s}
			}
			return nil
		case out.Refusal == storehistory.RefusalMismatch:
			if s.present && s.exact && s.token == in.Token && s.next != in.From && s.next != -1 {
				return []row{s}
			}
			return nil
		}
		return []row{s} // refused by its own writes or size: nothing changed
	case storehistory.OpOffset:
		switch {
		case out.Outcome == storehistory.OutcomeOK:
			if !s.present || s.next != out.Next || (s.exact && s.token != out.Token) || (!s.exact && out.Token <= s.token) {
				return nil
			}
			return []row{{present: true, token: out.Token, exact: true, next: out.Next}}
		case out.Outcome == storehistory.OutcomeFail:
			if s.present {
				return nil
			}
			return []row{s}
		}
		return []row{s}
	}
	return nil
}

// offsetAnomalies counts one partition's anomalies into r; end is its log
// end offset, -1 when unknown.
func offsetAnomalies(ops []*op, end int64, r *OffsetReport) {
	var done, maybe, acquires []*op
	var final *op // the last read that returned the row
	for _, o := range ops {
		switch {
		case o.in.Op == storehistory.OpCommit && o.ok():
			r.Commits++
			if o.in.Next > o.in.From { // an empty commit covers nothing
				done = append(done, o)
			}
		case o.in.Op == storehistory.OpCommit && o.unknown() && o.in.Next > o.in.From:
			maybe = append(maybe, o)
		case o.in.Op == storehistory.OpCommit && o.returned && o.out.Refusal == storehistory.RefusalFenced:
			r.RefusedFenced++
		case o.in.Op == storehistory.OpCommit && o.returned && o.out.Refusal == storehistory.RefusalMismatch:
			r.RefusedMismatch++
		case o.in.Op == storehistory.OpAcquire && o.ok():
			acquires = append(acquires, o)
		case o.in.Op == storehistory.OpOffset && o.ok() && (final == nil || o.call > final.call):
			final = o
		}
	}
	slices.SortFunc(done, func(a, b *op) int {
		return cmp.Or(cmp.Compare(a.in.From, b.in.From), cmp.Compare(a.in.Next, b.in.Next), cmp.Compare(a.call, b.call))
	})
	// Walk the commits in offset order from 0: every offset once.
	cover := int64(0)
	var prev *op
	for _, c := range done {
		switch {
		case prev != nil && c.in.From == prev.in.From && c.in.Next == prev.in.Next:
			r.Doubled += int(c.in.Next - c.in.From)
			continue
		case c.in.From < cover:
			r.Overlaps += int(min(cover, c.in.Next) - c.in.From)
		case c.in.From > cover:
			r.Gaps += int(c.in.From - bridge(maybe, cover, c.in.From))
		}
		if prev != nil {
			if c.in.Token < prev.in.Token {
				r.TokenDown++
			}
			if c.ret < prev.call {
				r.OutOfOrder++
			}
		}
		cover, prev = max(cover, c.in.Next), c
	}
	stored := cover
	if final != nil {
		stored = final.out.Next
		if stored > cover {
			r.Gaps += int(stored - bridge(maybe, cover, stored))
		}
	}
	if end >= 0 && end > stored {
		r.Uncommitted += int(end - stored)
	}
	// Tokens only rise: an Acquire returns more than any returned before
	// it began, and a commit under a token below one surely handed out
	// before it began must have been fenced.
	for _, b := range acquires {
		for _, a := range acquires {
			if a != b && a.ret < b.call && b.out.Token <= a.out.Token {
				r.TokenDown++
				break
			}
		}
	}
	for _, c := range done {
		for _, a := range acquires {
			if a.ret < c.call && a.out.Token > c.in.Token {
				r.FencedCommits++
				break
			}
		}
	}
}

// bridge returns how far from `from` towards `to` the unknown commits
// maybe chain (each starting where the one before ended): offsets a
// commit whose outcome is unknown may have stored are no gap.
func bridge(maybe []*op, from, to int64) int64 {
	at := from
	for at < to {
		step := at
		for _, o := range maybe {
			if o.in.From == at && o.in.Next <= to {
				step = max(step, o.in.Next)
			}
		}
		if step == at {
			break
		}
		at = step
	}
	return at
}
