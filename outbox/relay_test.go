package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/internal/testsupport/metrictest"
	"github.com/onceq/onceq/outbox"
	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = outbox.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

// running starts r.Run in the bubble and returns its stop.
func running(t *testing.T, r *outbox.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func msg(dest, key, body string) outbox.Message {
	return outbox.Message{Destination: dest, OrderingKey: key, Body: []byte(body)}
}

func states(t *testing.T, s outbox.Store) map[string]outbox.State {
	t.Helper()
	all, err := s.Entries(t.Context(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]outbox.State{}
	for _, e := range all {
		m[e.ID] = e.State
	}
	return m
}

func TestRelayDispatchesAndMarks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		sender := &recordingSender{}
		reader, mp := metrictest.Provider(t)
		commit(t, db, "in-1", msg("q", "", "a"), msg("q", "", "b"))
		// Polls at 3+7k seconds never fall on the test's own steps (63,
		// 70, 130 seconds), which would race the relay's pass against the
		// test's commit and readings.
		const poll = 7 * time.Second
		r, err := outbox.NewRelay(store, sender, quiet, outbox.WithMeterProvider(mp), outbox.PollInterval(poll))
		if err != nil {
			t.Fatal(err)
		}
		if n := metrictest.Counter(t, reader, "onceq.outbox.backlog"); n != 0 {
			t.Fatalf("backlog observed before Run: %d", n)
		}
		time.Sleep(3 * time.Second) // the entries wait: their age shows
		stop := running(t, r)
		synctest.Wait()
		if got := sender.order(); !slices.Equal(got, []string{"in-1#out0", "in-1#out1"}) {
			t.Fatalf("sent %v, want both entries once", got)
		}
		for id, st := range states(t, store) {
			if st != outbox.Dispatched {
				t.Errorf("%s is %s, want DISPATCHED", id, st)
			}
		}
		if n := metrictest.Counter(t, reader, "onceq.outbox.sends", attribute.String("onceq.result", "dispatched")); n != 2 {
			t.Errorf("dispatched sends = %d, want 2", n)
		}
		if c, sum := metrictest.Histogram(t, reader, "onceq.outbox.dispatch.latency"); c != 2 || sum != 6 {
			t.Errorf("latency: %d values summing %vs, want 2 of 3s", c, sum)
		}
		// The backlog is read from the store at most once a minute.
		time.Sleep(time.Minute)
		commit(t, db, "in-2", msg("q", "", "c"))
		if n := metrictest.Counter(t, reader, "onceq.outbox.backlog"); n != 1 {
			t.Errorf("backlog = %d, want 1", n)
		}
		if age, ok := metrictest.Gauge(t, reader, "onceq.outbox.backlog.oldest_age"); !ok || age != 0 {
			t.Errorf("oldest age %v (%v), want 0s: just committed", age, ok)
		}
		// New entries are picked up at the next poll.
		time.Sleep(poll)
		synctest.Wait()
		if got := sender.order(); len(got) != 3 {
			t.Errorf("sent %v after a poll, want the new entry too", got)
		}
		if n := metrictest.Counter(t, reader, "onceq.outbox.backlog"); n != 1 {
			t.Errorf("backlog = %d within the minute, want the last reading, 1", n)
		}
		time.Sleep(time.Minute)
		if n := metrictest.Counter(t, reader, "onceq.outbox.backlog"); n != 0 {
			t.Errorf("backlog = %d, want 0", n)
		}
		stop()
	})
}

// An entry of a lane is never sent before the one ahead of it was taken:
// the lane's entries go one per Send call, in commit order, while other
// lanes share the calls.
func TestRelayKeepsLaneOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		sender := &recordingSender{}
		commit(t, db, "in-1", msg("q", "k1", "1"), msg("q", "k1", "2"), msg("q", "k2", "x"), msg("q", "k1", "3"))
		commit(t, db, "in-2", msg("q", "k1", "4"), msg("other", "k1", "y"))
		r, err := outbox.NewRelay(store, sender, quiet)
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r)
		synctest.Wait()
		stop()
		var k1 []string
		for i, call := range sender.calls {
			lanes := map[string]bool{}
			for _, e := range call {
				lane := e.Destination + "/" + e.OrderingKey
				if lanes[lane] {
					t.Errorf("call %d holds two entries of lane %s", i, lane)
				}
				lanes[lane] = true
				if lane == "q/k1" {
					k1 = append(k1, string(e.Body))
				}
			}
		}
		if !slices.Equal(k1, []string{"1", "2", "3", "4"}) {
			t.Errorf("lane q/k1 sent as %v, want 1 2 3 4", k1)
		}
		if len(sender.calls) != 4 {
			t.Errorf("%d Send calls, want 4 (the longest lane's length)", len(sender.calls))
		}
	})
}

var errMoment = errors.New("connection reset")

// A failure of the moment gives the entry back, and the entries of its
// lane behind it with it; they go again, in order, after the backoff.
func TestRelayRetriesAFailureOfTheMomentInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		sender := &recordingSender{fail: func(e outbox.Entry, sent int) error {
			if string(e.Body) == "1" && sent < 2 {
				return errMoment
			}
			return nil
		}}
		reader, mp := metrictest.Provider(t)
		commit(t, db, "in-1", msg("q", "k", "1"), msg("q", "k", "2"), msg("q", "other", "z"))
		r, err := outbox.NewRelay(store, sender, quiet, outbox.WithMeterProvider(mp),
			outbox.RetryBackoff(time.Second, 4*time.Second), outbox.PollInterval(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r)
		synctest.Wait()
		if got := slices.Sorted(slices.Values(sender.order())); !slices.Equal(got, []string{"in-1#out0", "in-1#out2"}) {
			t.Fatalf("first pass sent %v, want the failing head and the other lane only", got)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		stop()
		want := []string{"in-1#out0", "in-1#out0", "in-1#out0", "in-1#out1"}
		if got := slices.DeleteFunc(sender.order(), func(id string) bool { return id == "in-1#out2" }); !slices.Equal(got, want) {
			t.Fatalf("lane k sent as %v, want %v", got, want)
		}
		for id, st := range states(t, store) {
			if st != outbox.Dispatched {
				t.Errorf("%s is %s, want DISPATCHED", id, st)
			}
		}
		if n := metrictest.Counter(t, reader, "onceq.outbox.sends", attribute.String("onceq.result", "retry")); n != 4 {
			t.Errorf("retry sends = %d, want 4 (the head twice, the one behind it twice)", n)
		}
		if n := metrictest.Counter(t, reader, "onceq.outbox.redispatches", attribute.String("onceq.reason", "retry")); n != 2 {
			t.Errorf("redispatches = %d, want 2 (the head's second and third sends; the one behind it was sent once)", n)
		}
	})
}

// The backoff is the configured first delay, doubled per failure.
func TestRelayBackoffDoubles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		var at []time.Duration
		start := time.Now()
		sender := &recordingSender{fail: func(e outbox.Entry, sent int) error {
			at = append(at, time.Since(start))
			if sent < 4 {
				return errMoment
			}
			return nil
		}}
		commit(t, db, "in", msg("q", "", "1"))
		r, err := outbox.NewRelay(store, sender, quiet, outbox.RetryBackoff(time.Second, 3*time.Second), outbox.PollInterval(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r)
		time.Sleep(time.Minute)
		synctest.Wait()
		stop()
		want := []time.Duration{0, time.Second, 3 * time.Second, 6 * time.Second, 9 * time.Second}
		if len(at) != len(want) {
			t.Fatalf("sent at %v, want %v", at, want)
		}
		for i := range want {
			// The next poll after the retry time picks it up.
			if at[i] < want[i] || at[i] > want[i]+20*time.Millisecond {
				t.Errorf("send %d at %v, want %v", i, at[i], want[i])
			}
		}
	})
}

// A refused entry goes Dead and the entries behind it go on.
func TestRelayRefusedEntryGoesDeadAndBlocksNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		sender := &recordingSender{fail: func(e outbox.Entry, _ int) error {
			if string(e.Body) == "too big" {
				return &outbox.RefusedError{Destination: e.Destination, Reason: "message too large"}
			}
			return nil
		}}
		reader, mp := metrictest.Provider(t)
		commit(t, db, "in", msg("q", "k", "too big"), msg("q", "k", "next"))
		r, err := outbox.NewRelay(store, sender, quiet, outbox.WithMeterProvider(mp))
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r)
		synctest.Wait()
		stop()
		if got := sender.order(); !slices.Equal(got, []string{"in#out0", "in#out1"}) {
			t.Fatalf("sent %v, want each once, in order", got)
		}
		st := states(t, store)
		if st["in#out0"] != outbox.Dead || st["in#out1"] != outbox.Dispatched {
			t.Fatalf("states %v, want the refused one DEAD and the next DISPATCHED", st)
		}
		dead, _ := store.Entries(t.Context(), outbox.Dead, 10)
		if len(dead) != 1 || dead[0].LastError == "" {
			t.Fatalf("dead entries %+v, want one with its reason", dead)
		}
		if n := metrictest.Counter(t, reader, "onceq.outbox.sends", attribute.String("onceq.result", "dead")); n != 1 {
			t.Errorf("dead sends = %d, want 1", n)
		}
	})
}

// A relay that died holding a lease is taken over once its lease runs
// out; the entry is sent again (a re-dispatch) and counted as a takeover.
func TestRelayTakesOverALapsedLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		sender := &recordingSender{}
		reader, mp := metrictest.Provider(t)
		commit(t, db, "in", msg("q", "", "1"))
		// A relay leases the entry and dies before marking it.
		now := time.Now()
		if got, _ := store.Lease(t.Context(), outbox.LeaseRequest{Owner: "dead-relay", Now: now, LeaseUntil: now.Add(30 * time.Second), Max: 10}); len(got) != 1 {
			t.Fatal("the first relay leased nothing")
		}
		r, err := outbox.NewRelay(store, sender, quiet, outbox.WithMeterProvider(mp), outbox.Owner("relay-2"))
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r)
		synctest.Wait()
		if len(sender.order()) != 0 {
			t.Fatal("sent an entry whose lease another relay holds")
		}
		time.Sleep(31 * time.Second)
		synctest.Wait()
		stop()
		if got := sender.order(); len(got) != 1 {
			t.Fatalf("sent %v after the lease ran out, want the entry once", got)
		}
		if n := metrictest.Counter(t, reader, "onceq.outbox.takeovers"); n != 1 {
			t.Errorf("takeovers = %d, want 1", n)
		}
		if n := metrictest.Counter(t, reader, "onceq.outbox.redispatches", attribute.String("onceq.reason", "takeover")); n != 1 {
			t.Errorf("takeover redispatches = %d, want 1", n)
		}
	})
}

// A relay whose send outlives its lease finds, at the mark, that another
// relay took the entry: it counts lease_lost and sends nothing more of the
// batch.
func TestRelayOutlivingItsLeaseStopsAndCountsLeaseLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		slow := &recordingSender{block: make(chan struct{}), stall: true}
		fast := &recordingSender{}
		reader, mp := metrictest.Provider(t)
		commit(t, db, "in", msg("q", "k", "1"), msg("q", "k", "2"))
		r1, err := outbox.NewRelay(store, slow, quiet, outbox.WithMeterProvider(mp), outbox.LeaseTTL(10*time.Second), outbox.Owner("r1"))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := outbox.NewRelay(store, fast, quiet, outbox.LeaseTTL(10*time.Second), outbox.Owner("r2"))
		if err != nil {
			t.Fatal(err)
		}
		stop1 := running(t, r1)
		synctest.Wait()
		time.Sleep(11 * time.Second)
		stop2 := running(t, r2)
		synctest.Wait()
		if got := fast.order(); !slices.Equal(got, []string{"in#out0", "in#out1"}) {
			t.Fatalf("the second relay sent %v", got)
		}
		close(slow.block)
		synctest.Wait()
		stop1()
		stop2()
		if got := slow.order(); !slices.Equal(got, []string{"in#out0"}) {
			t.Errorf("the stalled relay sent %v, want only what it had begun", got)
		}
		if n := metrictest.Counter(t, reader, "onceq.outbox.sends", attribute.String("onceq.result", "lease_lost")); n != 1 {
			t.Errorf("lease_lost = %d, want 1", n)
		}
	})
}

func TestRelayWakesOnSignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		sender := &recordingSender{}
		notify := make(chan struct{})
		wait := func(ctx context.Context) error {
			select {
			case <-notify:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		r, err := outbox.NewRelay(store, sender, quiet, outbox.PollInterval(time.Hour), outbox.WakeOn(wait))
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r)
		synctest.Wait()
		commit(t, db, "in", msg("q", "", "1"))
		notify <- struct{}{}
		synctest.Wait()
		if got := sender.order(); len(got) != 1 {
			t.Fatalf("sent %v after the signal, want the entry", got)
		}
		stop()
	})
}

// A failing wake signal falls back to polling, and Run still stops.
func TestRelayWakeSignalFailurePolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		sender := &recordingSender{}
		r, err := outbox.NewRelay(store, sender, quiet, outbox.PollInterval(time.Second),
			outbox.WakeOn(func(context.Context) error { return errors.New("listen: connection refused") }))
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r)
		commit(t, db, "in", msg("q", "", "1"))
		time.Sleep(time.Second)
		synctest.Wait()
		if got := sender.order(); len(got) != 1 {
			t.Fatalf("sent %v, want the entry by polling", got)
		}
		stop()
	})
}

// A full batch is followed at once by the next pass.
func TestRelayDrainsFullBatchesWithoutWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		sender := &recordingSender{}
		for i := range 25 {
			commit(t, db, fmt.Sprint("in-", i), msg("q", "", "x"))
		}
		r, err := outbox.NewRelay(store, sender, quiet, outbox.BatchSize(10), outbox.PollInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r)
		synctest.Wait()
		stop()
		if n := len(sender.order()); n != 25 {
			t.Fatalf("sent %d entries, want 25 without waiting for a poll", n)
		}
	})
}

// The marks of a pass under way when Run is cancelled are still written.
func TestRelayMarksWhatItSentOnStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		ctx, cancel := context.WithCancel(t.Context())
		sender := &recordingSender{fail: func(outbox.Entry, int) error { cancel(); return nil }}
		commit(t, db, "in", msg("q", "", "1"))
		r, err := outbox.NewRelay(store, sender, quiet)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if st := states(t, store)["in#out0"]; st != outbox.Dispatched {
			t.Fatalf("entry %s after a stop during its send, want DISPATCHED", st)
		}
		if err := r.Run(t.Context()); !errors.Is(err, outbox.ErrRunTwice) {
			t.Fatalf("second Run: %v, want ErrRunTwice", err)
		}
	})
}

type shortSender struct{}

func (shortSender) Send(context.Context, []outbox.Entry) []error { return nil }

// A Sender that answers for fewer entries than it was given has every
// entry sent again, rather than any taken as sent.
func TestRelaySenderWithTooFewResultsRetriesAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		commit(t, db, "in", msg("q", "", "1"))
		r, err := outbox.NewRelay(store, shortSender{}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Pass(t.Context()); err != nil {
			t.Fatal(err)
		}
		all, _ := store.Entries(t.Context(), "", 10)
		if all[0].State != outbox.Pending || all[0].Attempts != 1 {
			t.Fatalf("entry %+v, want PENDING with one attempt", all[0])
		}
	})
}

func TestNewRelayRefusesBadConfig(t *testing.T) {
	_, store := newStore(t)
	sender := &recordingSender{}
	for name, c := range map[string]struct {
		store  outbox.Store
		sender outbox.Sender
		opt    outbox.Option
	}{
		"no store":      {nil, sender, nil},
		"no sender":     {store, nil, nil},
		"batch":         {store, sender, outbox.BatchSize(0)},
		"lease":         {store, sender, outbox.LeaseTTL(0)},
		"poll":          {store, sender, outbox.PollInterval(-time.Second)},
		"retention":     {store, sender, outbox.Retention(0)},
		"deadRetention": {store, sender, outbox.DeadRetention(0)},
		"backoff":       {store, sender, outbox.RetryBackoff(time.Minute, time.Second)},
		"warnAfter":     {store, sender, outbox.WarnAfter(0)},
	} {
		if _, err := outbox.NewRelay(c.store, c.sender, c.opt); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// cleaningStore is an outbox that keeps expired entries until told.
type cleaningStore struct {
	outbox.Store
	mu      sync.Mutex
	cleaned []time.Time
	left    int // entries still to delete, a thousand a call at most
}

func (s *cleaningStore) DeleteExpired(_ context.Context, before time.Time, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleaned = append(s.cleaned, before)
	n := min(limit, s.left)
	s.left -= n
	return n, nil
}

// A running relay deletes expired entries from a store that keeps them:
// at once, again while a call finds a full batch, then every CleanupEvery.
func TestRelayCleansUpExpiredEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ob := newStore(t)
		store := &cleaningStore{Store: ob, left: 2500}
		r, err := outbox.NewRelay(store, &recordingSender{}, quiet, outbox.CleanupEvery(10*time.Minute), outbox.PollInterval(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		stop := running(t, r)
		synctest.Wait()
		time.Sleep(15 * time.Minute)
		synctest.Wait()
		stop()
		store.mu.Lock()
		defer store.mu.Unlock()
		var at []time.Duration
		for _, c := range store.cleaned {
			at = append(at, c.Sub(start))
		}
		want := []time.Duration{0, 0, 0, 10 * time.Minute}
		if len(at) != len(want) {
			t.Fatalf("cleanups at %v, want %v", at, want)
		}
		for i := range want {
			if at[i] < want[i] || at[i] > want[i]+time.Second {
				t.Errorf("cleanup %d at %v, want %v", i, at[i], want[i])
			}
		}
		if store.left != 0 {
			t.Errorf("%d expired entries left", store.left)
		}
	})
}

// overlapSender records the most Send calls in flight at once; each call
// takes a second.
type overlapSender struct {
	recordingSender
	mu             sync.Mutex
	inFlight, most int
}

func (s *overlapSender) Send(ctx context.Context, entries []outbox.Entry) []error {
	s.mu.Lock()
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.mu.Unlock()
	time.Sleep(time.Second)
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
	return s.recordingSender.Send(ctx, entries)
}

// With Concurrency, passes overlap, and each lane's entries still go out
// once each, in commit order.
func TestRelayConcurrentPassesKeepLaneOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		sender := &overlapSender{}
		for i := range 40 {
			msgs := make([]outbox.Message, 5)
			for l := range msgs {
				msgs[l] = msg("q", fmt.Sprint("lane-", l), fmt.Sprint(i))
			}
			msgs = append(msgs, msg("q", "", fmt.Sprint(i)))
			commit(t, db, fmt.Sprint("in-", i), msgs...)
		}
		r, err := outbox.NewRelay(store, sender, quiet, outbox.BatchSize(10), outbox.Concurrency(4))
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		stop()
		lanes := map[string][]string{}
		seen := map[string]int{}
		for _, call := range sender.calls {
			for _, e := range call {
				seen[e.ID]++
				if e.OrderingKey != "" {
					lanes[e.OrderingKey] = append(lanes[e.OrderingKey], string(e.Body))
				}
			}
		}
		if len(seen) != 240 {
			t.Fatalf("%d entries sent, want 240", len(seen))
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("%s sent %d times", id, n)
			}
		}
		for lane, bodies := range lanes {
			for i, b := range bodies {
				if b != fmt.Sprint(i) {
					t.Fatalf("lane %s sent as %v, want 0, 1, 2, ...", lane, bodies)
				}
			}
		}
		if sender.most < 2 {
			t.Errorf("at most %d Send calls at once, want passes to overlap", sender.most)
		}
	})
}

// A relay stopped in the middle of a pass gives back what it had not sent
// yet: another relay takes it at once, not after the lease, and counts
// neither a takeover nor a re-dispatch.
func TestRelayStoppedGivesBackWhatItDidNotSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		ctx, cancel := context.WithCancel(t.Context())
		first := &recordingSender{fail: func(outbox.Entry, int) error { cancel(); return nil }}
		commit(t, db, "in", msg("q", "k", "1"), msg("q", "k", "2"), msg("q", "k", "3"))
		r1, err := outbox.NewRelay(store, first, quiet, outbox.Owner("r1"))
		if err != nil {
			t.Fatal(err)
		}
		if err := r1.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if got := first.order(); !slices.Equal(got, []string{"in#out0"}) {
			t.Fatalf("the stopped relay sent %v, want the first entry only", got)
		}
		second := &recordingSender{}
		reader, mp := metrictest.Provider(t)
		r2, err := outbox.NewRelay(store, second, quiet, outbox.Owner("r2"), outbox.WithMeterProvider(mp))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r2.Pass(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := second.order(); !slices.Equal(got, []string{"in#out1", "in#out2"}) {
			t.Fatalf("the next relay sent %v at once, want the two left", got)
		}
		if n := metrictest.Counter(t, reader, "onceq.outbox.takeovers") + metrictest.Counter(t, reader, "onceq.outbox.redispatches"); n != 0 {
			t.Errorf("%d takeovers and re-dispatches counted for entries never sent", n)
		}
	})
}

// logRecorder keeps the relay's log records.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// warnings are the WARN records, each as its attributes.
func (l *logRecorder) warnings() []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.recs {
		if r.Level != slog.LevelWarn {
			continue
		}
		attrs := map[string]string{"msg": r.Message}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		out = append(out, attrs)
	}
	return out
}

// An entry whose sends keep failing for a reason of the moment is logged
// at WARN, with its hash and the reason, once its failures reach
// WarnAfter, and again as they double; never with its ID, which holds
// the input's key.
func TestRelayWarnsOfAnEntryThatKeepsFailing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		sender := &recordingSender{fail: func(outbox.Entry, int) error { return errMoment }}
		commit(t, db, "secret-key", msg("q", "", "1"))
		logs := &logRecorder{}
		r, err := outbox.NewRelay(store, sender, outbox.WithLogger(slog.New(logs)), outbox.WarnAfter(3),
			outbox.RetryBackoff(time.Second, time.Second), outbox.PollInterval(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r)
		// Sends at 0, 1, 2, ... seconds.
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if w := logs.warnings(); len(sender.order()) != 2 || len(w) != 0 {
			t.Fatalf("after %d failed sends: warnings %v, want none before WarnAfter(3)", len(sender.order()), w)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		w := logs.warnings()
		if len(sender.order()) != 3 || len(w) != 1 {
			t.Fatalf("after %d failed sends: warnings %v, want one at the third", len(sender.order()), w)
		}
		if w[0]["attempts"] != "3" || w[0]["reason"] != errMoment.Error() || w[0]["entry_hash"] == "" || w[0]["destination"] != "q" {
			t.Errorf("warning %v, want the entry's hash, destination, attempts and reason", w[0])
		}
		time.Sleep(9 * time.Second) // sends 4 to 12: warned again at 6 and 12
		synctest.Wait()
		stop()
		w = logs.warnings()
		var at []string
		for _, a := range w {
			at = append(at, a["attempts"])
			for k, v := range a {
				if strings.Contains(v, "secret-key") {
					t.Errorf("warning %s=%q holds the entry's ID", k, v)
				}
			}
		}
		if len(sender.order()) != 12 || !slices.Equal(at, []string{"3", "6", "12"}) {
			t.Errorf("after %d failed sends, warned at attempts %v, want 3, 6 and 12", len(sender.order()), at)
		}
	})
}
