package history

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/examples/storehistory"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// rows builds one process's offset-row history of partition "g/t/0", a
// call and its return at a time of their own, in the order written.
type rows struct {
	t     *testing.T
	lines []string
	id    int64
	clock int64
}

const part = "g/t/0"

func (b *rows) emit(e storehistory.Event) {
	b.clock++
	e.Key, e.Time = part, b.clock
	line, err := json.Marshal(e)
	if err != nil {
		b.t.Fatal(err)
	}
	b.lines = append(b.lines, string(line))
}

// call writes a call and returns its ID, for its return.
func (b *rows) call(e storehistory.Event) int64 {
	b.id++
	e.ID, e.Kind = b.id, storehistory.KindCall
	b.emit(e)
	return b.id
}

func (b *rows) ret(id int64, e storehistory.Event) {
	e.ID, e.Kind = id, storehistory.KindReturn
	if e.Outcome == "" {
		e.Outcome = storehistory.OutcomeOK
	}
	b.emit(e)
}

func (b *rows) acquire(member string, token, next int64) {
	b.ret(b.call(storehistory.Event{Op: storehistory.OpAcquire, Owner: member}), storehistory.Event{Token: token, Next: next})
}

func (b *rows) commit(token, from, next int64, out storehistory.Event) {
	b.ret(b.call(storehistory.Event{Op: storehistory.OpCommit, Token: token, From: from, Next: next}), out)
}

func (b *rows) read(token, next int64) {
	b.ret(b.call(storehistory.Event{Op: storehistory.OpOffset}), storehistory.Event{Token: token, Next: next})
}

var (
	ok       = storehistory.Event{}
	fenced   = storehistory.Event{Outcome: storehistory.OutcomeFail, Refusal: storehistory.RefusalFenced}
	mismatch = storehistory.Event{Outcome: storehistory.OutcomeFail, Refusal: storehistory.RefusalMismatch}
	noAnswer = storehistory.Event{Outcome: storehistory.OutcomeUnknown, Err: "connection reset"}
)

func checkRows(t *testing.T, end int64, b *rows) OffsetReport {
	t.Helper()
	h := NewOffsets()
	if err := h.Add(strings.NewReader(strings.Join(b.lines, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
	h.SetEnd(part, end)
	r := CheckOffsets(h, Options{Timeout: 5 * time.Second})
	t.Log(r.Line())
	return r
}

// good is a partition taken over twice: a zombie's commit fenced, a
// commit of unknown outcome that took effect (the next owner starts past
// it), a stale offset refused as a mismatch, an empty commit, and a final
// read at the log's end.
func good(t *testing.T) *rows {
	b := &rows{t: t}
	b.acquire("m1", 1, -1)
	b.commit(1, 0, 10, ok)
	b.commit(1, 10, 20, ok)
	b.acquire("m2", 2, 20)
	b.commit(1, 20, 30, fenced) // m1 is a zombie now
	b.commit(2, 10, 20, mismatch)
	b.commit(2, 20, 30, ok)
	b.commit(2, 30, 30, ok)
	b.call(storehistory.Event{Op: storehistory.OpCommit, Token: 2, From: 30, Next: 40}) // m2 killed here
	b.acquire("m3", 3, 40)
	b.commit(3, 40, 45, noAnswer) // its retry found it done:
	b.commit(3, 40, 45, mismatch)
	b.commit(3, 45, 50, ok)
	b.read(3, 50)
	return b
}

func TestOffsetsGoodHistory(t *testing.T) {
	r := checkRows(t, 50, good(t))
	if !r.OK() || r.Verdict() != "linearizable" || r.Commits != 5 || r.Unknown != 2 || r.Lost() != 0 || r.RefusedFenced != 1 || r.RefusedMismatch != 2 {
		t.Fatalf("a good history judged %s", r.Line())
	}
	if !strings.Contains(r.Line(), "lost=0 doubled=0") {
		t.Fatalf("line %q", r.Line())
	}
}

// Each kind of bad history is caught: by its anomaly count and by the
// model (not linearizable), or by the model alone for a store that
// refuses or reads wrongly.
func TestOffsetsBadHistories(t *testing.T) {
	for _, tc := range []struct {
		name  string
		end   int64
		build func(b *rows)
		count func(r OffsetReport) int
	}{
		{"gap", 20, func(b *rows) {
			b.acquire("m1", 1, -1)
			b.commit(1, 0, 10, ok)
			b.commit(1, 12, 20, ok)
			b.read(1, 20)
		}, func(r OffsetReport) int { return r.Gaps }},
		{"gap at the start", 20, func(b *rows) {
			b.acquire("m1", 1, -1)
			b.commit(1, 5, 20, ok)
			b.read(1, 20)
		}, nil}, // a first commit may start anywhere the store allows: only the count sees it
		{"overlap", 15, func(b *rows) {
			b.acquire("m1", 1, -1)
			b.commit(1, 0, 10, ok)
			b.commit(1, 5, 15, ok)
		}, func(r OffsetReport) int { return r.Overlaps }},
		{"double", 10, func(b *rows) {
			b.acquire("m1", 1, -1)
			b.commit(1, 0, 10, ok)
			b.commit(1, 0, 10, ok)
		}, func(r OffsetReport) int { return r.Doubled }},
		{"token down on acquire", 10, func(b *rows) {
			b.acquire("m1", 2, -1)
			b.acquire("m2", 1, -1)
			b.commit(1, 0, 10, ok)
		}, func(r OffsetReport) int { return r.TokenDown }},
		{"token down on commit", 20, func(b *rows) {
			b.acquire("m1", 1, -1)
			b.acquire("m2", 2, -1)
			b.commit(2, 0, 10, ok)
			b.commit(1, 10, 20, ok)
		}, func(r OffsetReport) int { return r.TokenDown }},
		{"zombie commit", 20, func(b *rows) {
			b.acquire("m1", 1, -1)
			b.commit(1, 0, 10, ok)
			b.acquire("m2", 2, 10)
			b.commit(1, 10, 20, ok)
		}, func(r OffsetReport) int { return r.FencedCommits }},
		{"out of order", 20, func(b *rows) {
			b.acquire("m1", 1, -1)
			b.commit(1, 10, 20, ok)
			b.commit(1, 0, 10, ok)
		}, func(r OffsetReport) int { return r.OutOfOrder }},
		{"uncommitted", 30, func(b *rows) {
			b.acquire("m1", 1, -1)
			b.commit(1, 0, 20, ok)
			b.read(1, 20)
		}, func(r OffsetReport) int { return r.Uncommitted }},
		{"wrongly refused", 10, func(b *rows) {
			b.acquire("m1", 1, -1)
			b.commit(1, 0, 10, ok)
			b.commit(1, 10, 20, mismatch)
			b.commit(1, 10, 20, fenced)
		}, nil},
		{"offset rolled back", 20, func(b *rows) {
			b.acquire("m1", 1, -1)
			b.commit(1, 0, 10, ok)
			b.commit(1, 10, 20, ok)
			b.read(1, 10)
		}, func(r OffsetReport) int { return r.Gaps + r.Uncommitted }},
		{"acquire loses the offset", 20, func(b *rows) {
			b.acquire("m1", 1, -1)
			b.commit(1, 0, 10, ok)
			b.acquire("m2", 2, -1)
			b.commit(2, 10, 20, ok)
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &rows{t: t}
			tc.build(b)
			r := checkRows(t, tc.end, b)
			if r.OK() {
				t.Fatalf("accepted: %s", r.Line())
			}
			if tc.count != nil && tc.count(r) == 0 {
				t.Fatalf("its anomaly not counted: %s", r.Line())
			}
			if tc.name != "gap at the start" && tc.name != "uncommitted" && r.Illegal == 0 {
				t.Fatalf("the model accepted it: %s", r.Line())
			}
		})
	}
}

// Partitions are judged apart: a clean partition beside a bad one counts
// once, and the violation names the bad one.
func TestOffsetsPartitionsApart(t *testing.T) {
	h := NewOffsets()
	for _, lines := range []string{
		`{"id":1,"ev":"call","op":"acquire","key":"g/t/1","t":1,"owner":"m1"}
{"id":1,"ev":"return","op":"acquire","key":"g/t/1","t":2,"out":"ok","token":1,"next":-1}
{"id":2,"ev":"call","op":"commit","key":"g/t/1","t":3,"token":1,"next":5}
{"id":2,"ev":"return","op":"commit","key":"g/t/1","t":4,"out":"ok"}
`,
		strings.Join(good(t).lines, "\n") + "\n",
		`{"id":1,"ev":"call","op":"commit","key":"g/t/1","t":5,"token":1,"next":5}
{"id":1,"ev":"return","op":"commit","key":"g/t/1","t":6,"out":"ok"}
{"id":2,"ev":"call","op":"commit","key":"g/t/1","t":7,"tok`, // a killed process's cut line
	} {
		if err := h.Add(strings.NewReader(lines)); err != nil {
			t.Fatal(err)
		}
	}
	h.SetEnd("g/t/1", 5)
	h.SetEnd(part, 50)
	r := CheckOffsets(h, Options{})
	if r.Partitions != 2 || r.Illegal != 1 || r.Doubled != 5 || !strings.Contains(r.Verdict(), "partition g/t/1:") {
		t.Fatalf("%s", r.Line())
	}
	if err := NewOffsets().Add(strings.NewReader(`{"id":1,"ev":"call","op":"claim","key":"k","t":1}` + "\n")); err == nil {
		t.Fatal("a per-key record call taken for an offset-row call")
	}
}

// noFence is an offset store whose Commit takes any token for the stored
// one: a zombie's commit goes through.
type noFence struct{ batch.Store }

func (n noFence) Commit(ctx context.Context, c batch.Commit) error {
	if l, err := n.Offset(ctx, c.Lease.Partition); err == nil {
		c.Lease.Token = l.Token
	}
	return n.Store.Commit(ctx, c)
}

// A zombie's commit, recorded through storehistory.Offsets: refused by
// the memory store, whose history is accepted; committed by a store that
// ignores the fence, whose history is caught.
func TestOffsetsBrokenFenceIsCaught(t *testing.T) {
	for _, tc := range []struct {
		name   string
		store  batch.Store
		caught bool
	}{
		{"memstore", memstoretest.New(t).Offsets(), false},
		{"no fence", noFence{memstoretest.New(t).Offsets()}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			rec := storehistory.NewOffsets(tc.store, &buf)
			ctx := context.Background()
			p := batch.Partition{Group: "g", Topic: "t", Partition: 0}
			m1, err := rec.Acquire(ctx, p, "m1")
			if err != nil {
				t.Fatal(err)
			}
			if err := rec.Commit(ctx, batch.Commit{Lease: m1, From: 0, Next: 5}); err != nil {
				t.Fatal(err)
			}
			m2, err := rec.Acquire(ctx, p, "m2")
			if err != nil {
				t.Fatal(err)
			}
			zombie := rec.Commit(ctx, batch.Commit{Lease: m1, From: 5, Next: 10})
			if err := rec.Commit(ctx, batch.Commit{Lease: m2, From: 5, Next: 10}); (err == nil) == (zombie == nil) {
				t.Fatalf("zombie's commit: %v; the owner's: %v", zombie, err)
			}
			_, _ = rec.Offset(ctx, p)
			h := NewOffsets()
			if err := h.Add(&buf); err != nil {
				t.Fatal(err)
			}
			h.SetEnd(p.String(), 10)
			r := CheckOffsets(h, Options{})
			t.Log(r.Line())
			if caught := !r.OK() && r.FencedCommits > 0 && r.Illegal > 0; caught != tc.caught {
				t.Fatalf("caught %v, want %v: %s", caught, tc.caught, r.Line())
			}
		})
	}
}

// A violation names the call no order explains, only the last three calls
// before it (a long history would bury it), and the row they left.
func TestOffsetsViolationText(t *testing.T) {
	b := &rows{t: t}
	b.acquire("m1", 1, -1)
	b.commit(1, 0, 10, ok)
	b.commit(1, 10, 20, ok)
	b.commit(1, 20, 30, ok)
	b.read(1, 10) // rolled back
	r := checkRows(t, 30, b)
	if want := "partition " + part + ": no legal point for read: ok token 1 next 10, after …, " +
		"commit [0,10) token 1: ok, commit [10,20) token 1: ok, commit [20,30) token 1: ok (row {token 1 next 30})"; r.Violation != want {
		t.Fatalf("violation\n%s\nwant\n%s", r.Violation, want)
	}
}
