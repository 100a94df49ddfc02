package redrive

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
)

// lot is a Lot over a slice, which records what Run did to each letter.
type lot struct {
	letters          []*Letter
	given            bool
	moved, settled   []string
	passed           []string
	closed           bool
	moveErr, takenID string
}

func (l *lot) Next(context.Context) ([]*Letter, error) {
	if l.given {
		return nil, nil
	}
	l.given = true
	return l.letters, nil
}

func (l *lot) Move(_ context.Context, x *Letter) error {
	if x.ID == l.takenID {
		return ErrTaken
	}
	if x.ID == l.moveErr {
		return errors.New("the broker refused it")
	}
	l.moved = append(l.moved, x.ID)
	return nil
}
func (l *lot) Settle(_ context.Context, x *Letter) error {
	l.settled = append(l.settled, x.ID)
	return nil
}
func (l *lot) Pass(_ context.Context, x *Letter) error { l.passed = append(l.passed, x.ID); return nil }
func (l *lot) Close(context.Context) error             { l.closed = true; return nil }

func letter(id, key, reason string) *Letter {
	return &Letter{ID: id, Key: key, KeyHash: dedup.KeyHash(key), Reason: reason, At: time.Now().Add(-time.Hour), From: "dlq", To: "queue"}
}

// records makes, in st, the record of each state: done (COMPLETED), dead
// (DEAD_LETTER), held (a live lease); absent has none.
func records(t *testing.T, st *memstore.Store) (done, dead, held, absent string) {
	t.Helper()
	ctx, now := t.Context(), time.Now()
	done, dead, held, absent = "ns#done-secret", "ns#dead-secret", "ns#held-secret", "ns#absent-secret"
	c, _ := st.Claim(ctx, dedup.ClaimRequest{Key: done, Owner: "w", Now: now, LeaseUntil: now.Add(time.Hour)})
	if err := st.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c, _ = st.Claim(ctx, dedup.ClaimRequest{Key: dead, Owner: "w", Now: now, LeaseUntil: now.Add(time.Hour)})
	if err := st.Fail(ctx, dedup.FailRequest{Lease: c.Lease, Reason: "x", Now: now, RetryAt: now.Add(time.Hour), DeadLetter: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, dedup.ClaimRequest{Key: held, Owner: "w", Now: now, LeaseUntil: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return done, dead, held, absent
}

// Each record leads to its action; the completed letter is never moved
// and its record never reset; a dry run writes nothing; the log names
// key hashes, never keys.
func TestRunDecidesByRecord(t *testing.T) {
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	done, dead, held, absent := records(t, st)
	mk := func() *lot {
		return &lot{letters: []*Letter{letter("1", done, "poison"), letter("2", dead, "poison"), letter("3", held, "poison"), letter("4", absent, "poison"),
			letter("5", absent, "other")}}
	}
	var logs bytes.Buffer
	o := Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	f := Filter{Reason: "poison"}

	plan := mk()
	rep, err := Plan(t.Context(), plan, st, f, o)
	if err != nil || rep.Seen != 5 || rep.Moved != 2 || rep.Completed != 1 || rep.Held != 1 || rep.Passed != 1 || !rep.DryRun {
		t.Fatalf("Plan: %+v %v", rep, err)
	}
	if len(plan.moved)+len(plan.settled)+len(plan.passed) != 0 || !plan.closed {
		t.Fatalf("Plan wrote: moved %v settled %v passed %v (closed %v)", plan.moved, plan.settled, plan.passed, plan.closed)
	}
	if r, _ := st.Get(t.Context(), dead); r.Status != dedup.StatusDeadLetter {
		t.Fatalf("Plan reset the record: %+v", r)
	}

	l := mk()
	rep, err = Run(t.Context(), l, st, f, o)
	if err != nil || rep.Moved != 2 || rep.Completed != 1 || rep.Held != 1 || rep.Passed != 1 {
		t.Fatalf("Run: %+v %v", rep, err)
	}
	if strings.Join(l.moved, ",") != "2,4" || strings.Join(l.settled, ",") != "2,4" || strings.Join(l.passed, ",") != "1,5" {
		t.Fatalf("moved %v, settled %v, passed %v; want 2 and 4 moved and settled, 1 and 5 passed, the held 3 left", l.moved, l.settled, l.passed)
	}
	if r, _ := st.Get(t.Context(), dead); r.Status != dedup.StatusFailed || r.Attempts != 0 || !strings.Contains(r.LastError, "redriven from dlq (2) to queue") {
		t.Fatalf("dead letter's record after Run: %+v, want reset", r)
	}
	if r, _ := st.Get(t.Context(), done); r.Status != dedup.StatusCompleted {
		t.Fatalf("completed record after Run: %+v", r)
	}
	if strings.Contains(logs.String(), "secret") || !strings.Contains(logs.String(), "key_hash="+dedup.KeyHash(dead)) {
		t.Fatalf("log:\n%s", logs.String())
	}

	// Again: the dead letter's record is FAILED now, and reset once more
	// (from its new version); the completed one is still never moved, and
	// with SettleCompleted it is taken off.
	l = mk()
	o.SettleCompleted = true
	if rep, err = Run(t.Context(), l, st, f, o); err != nil || rep.Completed != 1 || strings.Join(l.settled, ",") != "1,2,4" {
		t.Fatalf("second Run: %+v %v, settled %v", rep, err, l.settled)
	}
}

// A letter another run moved first is counted as such; a broker's
// refusal stops the run there, the letter left.
func TestRunTakenAndFailed(t *testing.T) {
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	l := &lot{letters: []*Letter{letter("1", "", "x"), letter("2", "", "x"), letter("3", "", "x")}, takenID: "1", moveErr: "2"}
	rep, err := Run(t.Context(), l, st, Filter{}, Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil || rep.Taken != 1 || rep.Failed != 1 || rep.Seen != 2 || len(l.moved) != 0 || !l.closed {
		t.Fatalf("Run: %+v %v, moved %v", rep, err, l.moved)
	}
}

// -max bounds the moves; the filter's key_hash and age select.
func TestFilter(t *testing.T) {
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	young := letter("y", "ns#y", "x")
	young.At = time.Now()
	l := &lot{letters: []*Letter{letter("a", "ns#a", "x"), young, letter("b", "ns#b", "x"), letter("c", "ns#c", "x")}}
	rep, err := Run(t.Context(), l, st, Filter{OlderThan: time.Minute, Max: 2}, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil || rep.Moved != 2 || rep.Passed != 1 || strings.Join(l.moved, ",") != "a,b" {
		t.Fatalf("Run: %+v %v, moved %v", rep, err, l.moved)
	}
	l = &lot{letters: []*Letter{letter("a", "ns#a", "x"), letter("b", "ns#b", "x")}}
	if rep, err = Run(t.Context(), l, st, Filter{KeyHash: dedup.KeyHash("ns#b")}, Options{Logger: slog.New(slog.DiscardHandler)}); err != nil || strings.Join(l.moved, ",") != "b" {
		t.Fatalf("Run by key_hash: %+v %v, moved %v", rep, err, l.moved)
	}
	for _, f := range []Filter{{KeyHash: "ABC"}, {OlderThan: -1}, {Max: -1}} {
		if f.Validate() == nil {
			t.Errorf("Filter %+v validated", f)
		}
	}
}

// -rate spaces the moves: ten at 5 a second take 1.8s of the clock.
func TestRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		l := &lot{}
		for i := range 10 {
			l.letters = append(l.letters, letter(string(rune('a'+i)), "", "x"))
		}
		start := time.Now()
		rep, err := Run(t.Context(), l, st, Filter{}, Options{Rate: 5, Logger: slog.New(slog.DiscardHandler)})
		if took := time.Since(start); err != nil || rep.Moved != 10 || took != 1800*time.Millisecond {
			t.Fatalf("Run at rate 5: %+v %v in %v, want 10 moved in 1.8s", rep, err, took)
		}
	})
}

// A letter set aside after the run began is left for the next run: a run
// never moves again what it moved and the workers dead-lettered again.
func TestRunLeavesNewerLetters(t *testing.T) {
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	newer := letter("n", "", "x")
	newer.At = time.Now().Add(time.Minute)
	l := &lot{letters: []*Letter{letter("a", "", "x"), newer}}
	rep, err := Run(t.Context(), l, st, Filter{}, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil || rep.Moved != 1 || rep.Newer != 1 || strings.Join(l.moved, ",") != "a" || len(l.passed) != 0 {
		t.Fatalf("Run: %+v %v, moved %v, passed %v", rep, err, l.moved, l.passed)
	}
}

// A rate too small for its interval to fit a time.Duration still paces:
// the first letter moves, the second waits (it wrapped to no wait at all,
// and -rate 1e-10 moved everything at once). NaN is refused.
func TestReviewRateTinyStillPaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		l := &lot{letters: []*Letter{letter("a", "", "x"), letter("b", "", "x")}}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan Report)
		go func() {
			rep, _ := Run(ctx, l, st, Filter{}, Options{Rate: 1e-10, Logger: slog.New(slog.DiscardHandler)})
			done <- rep
		}()
		synctest.Wait() // the run is blocked: on its pace, or done
		if strings.Join(l.moved, ",") != "a" {
			t.Fatalf("at rate 1e-10, moved %v before the clock moved; want a alone, b waiting", l.moved)
		}
		cancel()
		if rep := <-done; rep.Moved != 1 || rep.Failed != 1 {
			t.Fatalf("Run cancelled while pacing: %+v", rep)
		}
	})
	if _, err := Run(t.Context(), &lot{}, nil, Filter{}, Options{Rate: math.NaN()}); err == nil {
		t.Fatal("Run at rate NaN: no error")
	}
}
