package outbox_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/outbox"
)

// laneSender keeps lane order within a call as a LaneSender must: after
// an entry of a lane fails for the moment, it fails the rest of that lane
// in the call.
type laneSender struct{ recordingSender }

func (l *laneSender) KeepsLaneOrder() bool { return true }

func (l *laneSender) Send(ctx context.Context, entries []outbox.Entry) []error {
	errs := l.recordingSender.Send(ctx, entries)
	failed := map[string]bool{}
	for i, e := range entries {
		lane := e.Destination + "/" + e.OrderingKey
		if e.OrderingKey != "" && failed[lane] && !errors.Is(errs[i], outbox.ErrRefused) {
			errs[i] = errMoment
		}
		if errs[i] != nil && !errors.Is(errs[i], outbox.ErrRefused) {
			failed[lane] = true
		}
	}
	return errs
}

// A LaneSender takes a pass in one call, each lane's entries in order.
func TestRelayLaneSenderTakesAPassInOneCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		sender := &laneSender{}
		commit(t, db, "in-1", msg("q", "k1", "1"), msg("q", "k1", "2"), msg("q", "k2", "x"), msg("q", "k1", "3"))
		commit(t, db, "in-2", msg("q", "k1", "4"), msg("other", "k1", "y"))
		r, err := outbox.NewRelay(store, sender, quiet)
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r)
		synctest.Wait()
		stop()
		if len(sender.calls) != 1 {
			t.Fatalf("%d Send calls, want 1", len(sender.calls))
		}
		var k1 []string
		for _, e := range sender.calls[0] {
			if e.Destination == "q" && e.OrderingKey == "k1" {
				k1 = append(k1, string(e.Body))
			}
		}
		if !slices.Equal(k1, []string{"1", "2", "3", "4"}) {
			t.Errorf("lane q/k1 sent as %v, want 1 2 3 4", k1)
		}
		for id, st := range states(t, store) {
			if st != outbox.Dispatched {
				t.Errorf("%s is %s, want DISPATCHED", id, st)
			}
		}
	})
}

// An entry of a LaneSender's call that fails for the moment is retried
// (an attempt counted); those behind it in its lane are given back unsent
// (no attempt), and the lane goes again in order after the backoff.
func TestRelayLaneSenderFailureHoldsBackTheLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		sender := &laneSender{recordingSender{fail: func(e outbox.Entry, sent int) error {
			if string(e.Body) == "2" && sent == 0 {
				return errMoment
			}
			return nil
		}}}
		commit(t, db, "in-1", msg("q", "k", "1"), msg("q", "k", "2"), msg("q", "k", "3"), msg("q", "other", "z"))
		r, err := outbox.NewRelay(store, sender, quiet, outbox.RetryBackoff(time.Second, 4*time.Second), outbox.PollInterval(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r)
		synctest.Wait()
		pending, err := store.Entries(t.Context(), outbox.Pending, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][2]int{}
		for _, e := range pending {
			got[string(e.Body)] = [2]int{e.Attempts, e.Releases}
		}
		if want := map[string][2]int{"2": {1, 0}, "3": {0, 1}}; !maps.Equal(got, want) {
			t.Fatalf("pending after the first pass (attempts, releases): %v, want %v", got, want)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		stop()
		var lane []string
		for _, id := range sender.order() {
			if id != "in-1#out3" {
				lane = append(lane, id)
			}
		}
		if want := []string{"in-1#out0", "in-1#out1", "in-1#out2", "in-1#out1", "in-1#out2"}; !slices.Equal(lane, want) {
			t.Fatalf("lane k sent as %v, want %v", lane, want)
		}
		for id, st := range states(t, store) {
			if st != outbox.Dispatched {
				t.Errorf("%s is %s, want DISPATCHED", id, st)
			}
		}
	})
}
