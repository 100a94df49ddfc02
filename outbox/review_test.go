package outbox_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/onceq/onceq/internal/testsupport/metrictest"

	"github.com/onceq/onceq/outbox"
)

// panicSender panics on every Send, as a Sender with a bug does on one
// entry it cannot handle.
type panicSender struct{}

func (panicSender) Send(context.Context, []outbox.Entry) []error { panic("sender bug") }

// A Sender that panics must not take the relay (and the process) down:
// the entry that makes it panic would otherwise crash every relay that
// leases it, for ever, and stall the whole outbox.
func TestReviewSenderPanicIsAFailureNotACrash(t *testing.T) {
	db, store := newStore(t)
	commit(t, db, "in", msg("q", "", "1"))
	r, err := outbox.NewRelay(store, panicSender{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("Pass panicked with the Sender: %v", p)
			}
		}()
		if n, err := r.Pass(t.Context()); n != 1 || err != nil {
			t.Errorf("Pass = %d, %v; want 1 entry leased and given back", n, err)
		}
	}()
	all, err := store.Entries(t.Context(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].State != outbox.Pending || all[0].Attempts != 1 || all[0].LastError == "" {
		t.Errorf("entries %+v, want the one entry given back to retry with the panic as its reason", all)
	}
}

// ctxSender blocks each Send until its ctx ends, as a Sender stuck on a
// broker that does not answer, and answers the ctx's error.
type ctxSender struct{ calls chan struct{} }

func (s ctxSender) Send(ctx context.Context, entries []outbox.Entry) []error {
	s.calls <- struct{}{}
	<-ctx.Done()
	errs := make([]error, len(entries))
	for i := range errs {
		errs[i] = ctx.Err()
	}
	return errs
}

// A Send stuck past the lease must end with the lease: otherwise a second
// relay takes the entries over and sends them while the first is still
// sending them (two relays acting on one entry at once), and the first
// relay's pass, and with Concurrency(1) the relay, is stuck for as long
// as the Sender is.
func TestReviewSendEndsWithTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		commit(t, db, "in", msg("q", "k", "1"))
		sender := ctxSender{calls: make(chan struct{}, 10)}
		r, err := outbox.NewRelay(store, sender, quiet, outbox.LeaseTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = r.Pass(ctx)
		}()
		<-sender.calls
		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Errorf("the Send is still under way after the relay's lease ended; its ctx has no deadline at the lease's end")
		}
		cancel()
		<-done
	})
}

// An entry held back behind a failing head of its lane was never sent:
// its own first failure must get the first backoff and no WARN, as an
// entry that failed once. Instead each hold-back counts as a failure
// (Entry.Attempts says it counts failed sends), so an entry that waited
// behind a head failing for a while gets the longest backoff, and a WARN
// line, on its first failure.
func TestReviewHeldBackEntryKeepsItsOwnBackoffAndWarnCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		sender := &recordingSender{fail: func(e outbox.Entry, sent int) error {
			switch {
			case string(e.Body) == "1" && sent < 4:
				return errMoment // the head fails at 0, 1, 3 and 7s; taken at 15s
			case string(e.Body) == "2" && sent < 1:
				return errMoment // its own first failure, at 15s
			}
			return nil
		}}
		commit(t, db, "in", msg("q", "k", "1"), msg("q", "k", "2"))
		logs := &logRecorder{}
		r, err := outbox.NewRelay(store, sender, outbox.WithLogger(slog.New(logs)), outbox.WarnAfter(5),
			outbox.RetryBackoff(time.Second, time.Minute), outbox.PollInterval(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r)
		time.Sleep(15*time.Second + 500*time.Millisecond)
		synctest.Wait()
		if got := sender.order(); !slices.Equal(got, []string{"in#out0", "in#out0", "in#out0", "in#out0", "in#out0", "in#out1"}) {
			stop()
			t.Fatalf("sent %v by 15.5s, want the head five times, then the second once", got)
		}
		// Its first failure's backoff is the first delay, 1s.
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		stop()
		if got := sender.order(); len(got) != 7 || got[6] != "in#out1" {
			t.Errorf("sent %v by 17s, want the second entry sent again one second after its one failure", got)
		}
		if w := logs.warnings(); len(w) != 0 {
			t.Errorf("warnings %v, want none: no entry failed WarnAfter(5) times", w)
		}
	})
}

// A relay whose lease was taken over while it sent must not count, nor
// log, its Dead and Retry marks as written: the store refused them
// (ErrLeaseLost), and the entry is the other relay's, here DISPATCHED.
// They are lease_lost, as a lost Dispatched mark is.
func TestReviewLostDeadAndRetryMarksCountAsLeaseLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		slow := &recordingSender{block: make(chan struct{}), stall: true, fail: func(e outbox.Entry, _ int) error {
			if string(e.Body) == "refused" {
				return &outbox.RefusedError{Destination: e.Destination, Reason: "too large"}
			}
			return errMoment
		}}
		reader, mp := metrictest.Provider(t)
		logs := &logRecorder{}
		commit(t, db, "in", msg("q", "", "refused"), msg("q", "", "moment"))
		r1, err := outbox.NewRelay(store, slow, outbox.WithLogger(slog.New(logs)), outbox.WithMeterProvider(mp),
			outbox.LeaseTTL(10*time.Second), outbox.Owner("r1"), outbox.WarnAfter(1))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := outbox.NewRelay(store, &recordingSender{}, quiet, outbox.LeaseTTL(10*time.Second), outbox.Owner("r2"))
		if err != nil {
			t.Fatal(err)
		}
		stop1 := running(t, r1)
		synctest.Wait()
		time.Sleep(11 * time.Second)
		stop2 := running(t, r2)
		synctest.Wait()
		close(slow.block) // r1's Send ends now, its leases long taken over
		synctest.Wait()
		stop1()
		stop2()
		for id, st := range states(t, store) {
			if st != outbox.Dispatched {
				t.Errorf("%s is %s, want DISPATCHED by the second relay", id, st)
			}
		}
		for result, want := range map[string]int64{"dead": 0, "retry": 0, "lease_lost": 2} {
			if n := metrictest.Counter(t, reader, "onceq.outbox.sends", attribute.String("onceq.result", result)); n != want {
				t.Errorf("sends{result=%s} = %d, want %d", result, n, want)
			}
		}
		for _, w := range logs.warnings() {
			if m := w["msg"]; strings.Contains(m, "kept as DEAD") || strings.Contains(m, "keeps failing") {
				t.Errorf("warning %q for a mark the store refused: the entry is another relay's", m)
			}
		}
	})
}

// reorderingSender fails the entries whose body is "fail" and then, its
// answers given in the order it was handed the entries, sorts the slice
// it was handed in place (as a Sender grouping entries by destination
// may): the Sender interface does not forbid it.
type reorderingSender struct{}

func (reorderingSender) Send(_ context.Context, entries []outbox.Entry) []error {
	errs := make([]error, len(entries))
	for i, e := range entries {
		if string(e.Body) == "fail" {
			errs[i] = errMoment
		}
	}
	slices.Reverse(entries)
	return errs
}

// The relay must mark each entry by its own answer, whatever the Sender
// does with the slice it was handed: otherwise the failed entry is
// marked DISPATCHED (lost) and the sent one given back.
func TestReviewSenderReorderingItsSliceMarksEachEntryByItsAnswer(t *testing.T) {
	db, store := newStore(t)
	commit(t, db, "in", msg("q", "", "fail"), msg("q", "", "ok"))
	r, err := outbox.NewRelay(store, reorderingSender{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	all, err := store.Entries(t.Context(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		want := outbox.Dispatched
		if string(e.Body) == "fail" {
			want = outbox.Pending
		}
		if e.State != want {
			t.Errorf("entry %q is %s, want %s", e.Body, e.State, want)
		}
	}
}

// typedNilSender answers a nil *outbox.RefusedError for each entry: the
// classic Go slip of a helper that returns *RefusedError, nil for taken,
// assigned to an error, which is then not nil.
type typedNilSender struct{}

func (typedNilSender) Send(_ context.Context, entries []outbox.Entry) []error {
	errs := make([]error, len(entries))
	for i := range errs {
		var refused *outbox.RefusedError
		errs[i] = refused
	}
	return errs
}

// A typed nil error from the Sender must not crash the relay (its Error
// method dereferences nil) nor send the entry DEAD: the entry is given
// back, with a reason that names the Sender's slip.
func TestReviewSenderTypedNilErrorIsNoCrash(t *testing.T) {
	db, store := newStore(t)
	commit(t, db, "in", msg("q", "", "1"))
	r, err := outbox.NewRelay(store, typedNilSender{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("Pass panicked on the Sender's typed nil error: %v", p)
			}
		}()
		if _, err := r.Pass(t.Context()); err != nil {
			t.Errorf("Pass: %v", err)
		}
	}()
	all, err := store.Entries(t.Context(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].State != outbox.Pending || all[0].LastError == "" {
		t.Errorf("entries %+v, want the entry given back with a reason", all)
	}
}
