package history

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/examples/storehistory"
)

// Report is what Check found.
type Report struct {
	Keys    int // keys with a history
	Ops     int // store calls
	Unknown int // calls whose outcome is unknown (an error, or no return)
	Acks    int // messages acked
	Effects int // keys whose business effects were counted (AddEffects)

	// Illegal counts the keys whose history no order of their calls
	// explains; Violation describes the first (by key hash). TimedOut
	// counts the keys left undecided after the timeout.
	Illegal   int
	Violation string
	TimedOut  int

	// The anomalies, Jepsen's names. Lost: keys acked that no call
	// committed or read as COMPLETED, or whose counted effect was never
	// applied. Duplicated: keys committed again while an earlier commit's
	// record was live (within its retention: a claim past it is a new
	// message), or whose effect was applied more than once (AddEffects:
	// what shows a double commit whose outcome was unknown).
	// AckedUncommitted: acks that came before any commit of their key was
	// known. FencedCommits: Completes that succeeded although another
	// claim had surely taken the key over since their lease began.
	Lost, Duplicated, AckedUncommitted, FencedCommits int

	Took time.Duration
}

// Verdict is "linearizable", "not linearizable: …" naming the violation,
// or "unknown: …" when keys were left undecided and none was illegal.
func (r Report) Verdict() string { return verdict(r.Illegal, r.TimedOut, r.Violation, "keys") }

// verdict is a check's verdict on its units (keys, partitions): illegal
// of them not linearizable, the first as violation says, or else
// timedOut of them not decided in time.
func verdict(illegal, timedOut int, violation, units string) string {
	switch {
	case illegal > 0:
		v := "not linearizable: " + violation
		if illegal > 1 {
			v += fmt.Sprintf(" (and %d more %s)", illegal-1, units)
		}
		return v
	case timedOut > 0:
		return fmt.Sprintf("unknown: %d %s not decided in time", timedOut, units)
	}
	return "linearizable"
}

// Anomalies is the sum of the anomaly counts.
func (r Report) Anomalies() int {
	return r.Lost + r.Duplicated + r.AckedUncommitted + r.FencedCommits
}

// OK reports whether no key was illegal and no anomaly was found (keys
// left undecided do not fail it: Verdict says so).
func (r Report) OK() bool { return r.Illegal == 0 && r.Anomalies() == 0 }

// Line is the report on one line, the verdict last.
func (r Report) Line() string {
	return fmt.Sprintf("history: keys=%d ops=%d unknown=%d acks=%d effects=%d lost=%d duplicated=%d acked_uncommitted=%d fenced_commits=%d checked_in=%s verdict: %s",
		r.Keys, r.Ops, r.Unknown, r.Acks, r.Effects, r.Lost, r.Duplicated, r.AckedUncommitted, r.FencedCommits, r.Took.Round(time.Millisecond), r.Verdict())
}

// Options tune Check.
type Options struct {
	// Timeout bounds the search for one key's linearization; a key not
	// decided by then counts as TimedOut. Zero: 10 seconds.
	Timeout time.Duration
	// Parallel is how many keys are checked at once. Zero: GOMAXPROCS.
	Parallel int
	// Budget bounds the whole search: keys not yet searched when it has
	// passed count as TimedOut (their anomalies are still counted). Zero:
	// 5 minutes.
	Budget time.Duration
	// Resets counts, by key_hash, the resets (dedup.Resetter) an
	// operator's tool made outside the histories (onceq redrive logs each
	// with its key_hash): the model lets such a key's FAILED, DEAD_LETTER
	// or PENDING record become FAILED one version on, up to that many
	// times between two calls, and nothing more.
	Resets map[string]int
}

// Check checks every key's history for linearizability and counts the
// anomalies.
func Check(h *History, o Options) Report {
	start := time.Now()
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Parallel <= 0 {
		o.Parallel = runtime.GOMAXPROCS(0)
	}
	if o.Budget <= 0 {
		o.Budget = 5 * time.Minute
	}
	deadline := start.Add(o.Budget)
	keys := make([]string, 0, len(h.keys))
	for k := range h.keys {
		keys = append(keys, k)
	}
	// Violations are reported in key-hash order, the same on every run.
	hashes := make(map[string]string, len(keys))
	for _, k := range keys {
		hashes[k] = dedup.KeyHash(k)
	}
	sort.Slice(keys, func(i, j int) bool { return hashes[keys[i]] < hashes[keys[j]] })

	results := make([]keyResult, len(keys))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(o.Parallel, max(len(keys), 1)) {
		wg.Go(func() {
			for i := range work {
				timeout := min(o.Timeout, time.Until(deadline))
				results[i] = checkKey(hashes[keys[i]], h.keys[keys[i]], timeout, o.Resets[hashes[keys[i]]])
			}
		})
	}
	for i := range keys {
		work <- i
	}
	close(work)
	wg.Wait()

	r := Report{Keys: len(keys)}
	for _, kr := range results {
		r.Ops += kr.ops
		r.Unknown += kr.unknown
		r.Acks += kr.acks
		r.Effects += kr.effects
		r.Lost += kr.lost
		r.Duplicated += kr.duplicated
		r.AckedUncommitted += kr.ackedUncommitted
		r.FencedCommits += kr.fencedCommits
		switch kr.verdict {
		case porcupine.Illegal:
			if r.Illegal == 0 {
				r.Violation = kr.violation
			}
			r.Illegal++
		case porcupine.Unknown:
			r.TimedOut++
		}
	}
	r.Took = time.Since(start)
	return r
}

// keyResult is one key's part of the Report.
type keyResult struct {
	verdict                                           porcupine.CheckResult
	violation                                         string
	ops, unknown, acks, effects                       int
	lost, duplicated, ackedUncommitted, fencedCommits int
}

func checkKey(hash string, kh *keyHistory, timeout time.Duration, resets int) keyResult {
	kr := keyResult{ops: len(kh.ops)}
	ops := make([]porcupine.Operation, 0, len(kh.ops))
	for _, o := range kh.ops {
		if o.unknown() {
			kr.unknown++
		}
		if o.in.Op == storehistory.OpGet && o.unknown() {
			continue // a read that saw nothing tells nothing
		}
		ops = append(ops, o.operation())
	}
	anomalies(kh, &kr)
	if timeout <= 0 {
		kr.verdict = porcupine.Unknown // the budget is spent
		return kr
	}
	m := newModel(resets)
	kr.verdict = porcupine.CheckOperationsTimeout(m, ops, timeout)
	if kr.verdict == porcupine.Illegal {
		kr.violation = violation(hash, m, ops, timeout)
	}
	return kr
}

// violation names the first call (by call time) that no partial
// linearization of ops could take, and the record the longest one reached.
func violation(hash string, m porcupine.Model, ops []porcupine.Operation, timeout time.Duration) string {
	if d, ok := describeViolation(m, ops, timeout, 0, "record"); ok {
		return "key_hash " + hash + ": " + d
	}
	return "key_hash " + hash
}

// describeViolation names the first call (by call time) that the longest
// partial linearization of ops leaves out, the calls that linearization
// took (only its last keep, after "…", when keep > 0 and it took more)
// and the state, called what, it reached. ok is false when it left no
// call out.
func describeViolation(m porcupine.Model, ops []porcupine.Operation, timeout time.Duration, keep int, what string) (d string, ok bool) {
	_, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	var longest []int
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	// Replay the longest linearization to the state it reached.
	st := m.Init()
	var seq []string
	for _, id := range longest {
		_, st = m.Step(st, ops[id].Input, ops[id].Output)
		seq = append(seq, m.DescribeOperation(ops[id].Input, ops[id].Output))
	}
	first := -1
	for i := range ops {
		if !slices.Contains(longest, i) && (first < 0 || ops[i].Call < ops[first].Call) {
			first = i
		}
	}
	if first < 0 {
		return "", false
	}
	if keep > 0 && len(seq) > keep {
		seq = append([]string{"…"}, seq[len(seq)-keep:]...)
	}
	return fmt.Sprintf("no legal point for %s, after %s (%s %s)",
		m.DescribeOperation(ops[first].Input, ops[first].Output), orNothing(seq), what, m.DescribeState(st)), true
}

func orNothing(seq []string) string {
	if len(seq) == 0 {
		return "nothing"
	}
	return strings.Join(seq, ", ")
}

// commit is a successful commit: the Now of the claim it ran under and
// the expiry of the COMPLETED record it wrote.
type commit struct{ claimed, until int64 }

// anomalies counts one key's anomalies from its calls and acks alone.
func anomalies(kh *keyHistory, kr *keyResult) {
	claimedBy := claims(kh.ops)
	var completedAt []int64 // when a COMPLETED record was surely known
	var commits []commit
	for _, o := range kh.ops {
		if !o.ok() {
			continue
		}
		switch {
		case o.in.Op == storehistory.OpComplete:
			c := commit{o.in.Now, o.in.Until}
			if cl := claimedBy[o.in.Owner]; cl != nil {
				c.claimed = cl.in.Now
			}
			commits = append(commits, c)
			completedAt = append(completedAt, o.ret)
		case o.in.Op == storehistory.OpClaimComplete && o.out.Acquired:
			commits = append(commits, commit{o.in.Now, o.in.Until})
			completedAt = append(completedAt, o.ret)
		case o.out.Record != nil && o.out.Record.Status == dedup.StatusCompleted:
			completedAt = append(completedAt, o.ret) // a claim or read met it
		}
	}
	if twice(commits) || kh.effects > 1 {
		kr.duplicated++
	}
	if kh.counted {
		kr.effects++
	}
	acked := false
	for _, s := range kh.settles {
		if s.Action != "ack" {
			continue
		}
		kr.acks++
		acked = true
		if !slices.ContainsFunc(completedAt, func(t int64) bool { return t <= s.Time }) {
			kr.ackedUncommitted++
		}
	}
	if acked && (len(completedAt) == 0 || kh.counted && kh.effects == 0) {
		kr.lost++
	}
	kr.fencedCommits = fencedCommits(kh.ops, claimedBy)
}

// twice reports whether a commit's claim came while an earlier commit's
// record was still live.
func twice(commits []commit) bool {
	slices.SortFunc(commits, func(a, b commit) int { return cmp.Compare(a.claimed, b.claimed) })
	for j := 1; j < len(commits); j++ {
		for _, c := range commits[:j] {
			if c.until >= commits[j].claimed {
				return true
			}
		}
	}
	return false
}

// claims returns the claims surely acquired, by owner (owner tokens are
// unique to a claim).
func claims(ops []*op) map[string]*op {
	by := map[string]*op{}
	for _, o := range ops {
		if (o.in.Op == storehistory.OpClaim || o.in.Op == storehistory.OpClaimComplete) && o.ok() && o.out.Acquired {
			by[o.in.Owner] = o
		}
	}
	return by
}

// fencedCommits counts the Completes that succeeded although, after their
// own claim returned and before they were called, another owner's claim
// of the key had surely succeeded.
func fencedCommits(ops []*op, claimedBy map[string]*op) int {
	n := 0
	for _, c := range ops {
		if c.in.Op != storehistory.OpComplete || !c.ok() {
			continue
		}
		mine := claimedBy[c.in.Owner]
		if mine == nil {
			continue
		}
		for _, t := range claimedBy {
			if t.in.Owner != c.in.Owner && t.call > mine.ret && t.ret < c.call {
				n++
				break
			}
		}
	}
	return n
}
