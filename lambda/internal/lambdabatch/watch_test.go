package lambdabatch

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// downStore is a store whose first down claims go unanswered until their
// deadline, as a store that accepts connections and never answers; the
// calls after them are answered.
type downStore struct {
	dedup.Store
	down atomic.Int32
}

func (s *downStore) String() string { return "test table at 192.0.2.1:8000" }

func (s *downStore) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	if s.down.Add(-1) >= 0 {
		<-ctx.Done()
		return dedup.Claim{}, fmt.Errorf("test store: claim: %w", ctx.Err())
	}
	return s.Store.Claim(ctx, req)
}

// lines keeps the log's records, with the (bubble's) time each was said.
type lines struct {
	mu  sync.Mutex
	got []slog.Record
}

func (l *lines) Enabled(context.Context, slog.Level) bool { return true }
func (l *lines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, r.Clone())
	return nil
}
func (l *lines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lines) WithGroup(string) slog.Handler      { return l }

func attrs(r slog.Record) map[string]string {
	out := map[string]string{}
	r.Attrs(func(a slog.Attr) bool { out[a.Key] = a.Value.String(); return true })
	return out
}

// While the store does not answer, an invocation says so, naming the
// store, what it waits for and for how long: at the first call that has
// waited 5 s, at the first record the store could not take, and then never
// more than 30 s apart until the store answers again, which is said too.
// The records it could not take come back; the others are done.
func TestStoreDownSaidWhileItLasts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const downClaims, records = 6, 10
		store := &downStore{Store: memstoretest.New(t)}
		store.down.Store(downClaims)
		log := &lines{}
		cfg := NewConfig("testlambda", 5*time.Second)
		cfg.Concurrency, cfg.Logger = 1, slog.New(log)
		h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
			return consumer.Result{}, nil
		})
		r, err := New(store, h, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		recs := make([]Record, records)
		groups := make([][]int, records)
		for i := range recs {
			recs[i].Msg = &consumer.Message{ID: fmt.Sprint(i), Body: []byte(fmt.Sprint("body ", i))}
			groups[i] = []int{i}
		}
		start := time.Now()
		if err := r.Run(ctx, recs, groups); err != nil {
			t.Fatalf("Run: %v", err)
		}
		end := time.Now()
		for i, rec := range recs {
			if rec.Back != (i < downClaims) {
				t.Errorf("record %d: back %v, want %v (the store answered from the %dth claim on)", i, rec.Back, i < downClaims, downClaims+1)
			}
		}

		var said []time.Time
		var unavailable, back bool
		for _, l := range log.got {
			if !strings.Contains(l.Message, "store") {
				continue
			}
			a := attrs(l)
			if a["store"] != store.String() {
				t.Errorf("line %q %v: want the store named %q", l.Message, a, store.String())
			}
			switch {
			case strings.Contains(l.Message, "reachable again"):
				back = true
				if a["unavailable_for"] == "" {
					t.Errorf("line %q %v: want how long the store was unavailable", l.Message, a)
				}
				continue
			case strings.Contains(l.Message, "store unavailable"):
				if !unavailable && l.Time.Sub(start) != 10*time.Second {
					t.Errorf("first unavailable line at %v, want at the first failure, 10s in", l.Time.Sub(start))
				}
				unavailable = true
				if !strings.Contains(a["error"], "deadline exceeded") {
					t.Errorf("line %q %v: want the call's error", l.Message, a)
				}
			}
			if a["waiting_for"] != "Claim" || (a["waited"] == "" && a["unavailable_for"] == "") {
				t.Errorf("line %q %v: want what it waits for (Claim) and for how long", l.Message, a)
			}
			said = append(said, l.Time)
			t.Logf("%v: %s %v", l.Time.Sub(start), l.Message, a)
		}
		if !unavailable || !back {
			t.Fatalf("said the store unavailable %v, reachable again %v; want both: %v", unavailable, back, messages(log))
		}
		down := start.Add(downClaims * 10 * time.Second) // the last unanswered claim's deadline
		if said[0].Sub(start) > 5*time.Second {
			t.Errorf("first line %v into the wait, want at most 5s", said[0].Sub(start))
		}
		for i := 1; i < len(said); i++ {
			if gap := said[i].Sub(said[i-1]); gap > storeLogEvery {
				t.Errorf("lines %v apart (%v and %v into the wait), want at most %v", gap, said[i-1].Sub(start), said[i].Sub(start), storeLogEvery)
			}
		}
		if gap := down.Sub(said[len(said)-1]); gap > storeLogEvery {
			t.Errorf("last line %v before the store answered, want at most %v", gap, storeLogEvery)
		}
		t.Logf("%d lines over %v of outage; invocation took %v", len(said), down.Sub(start), end.Sub(start))
	})
}

func messages(l *lines) []string {
	var out []string
	for _, r := range l.got {
		out = append(out, r.Message)
	}
	return out
}
