package outbox_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/attribute"

	"github.com/onceq/onceq/internal/testsupport/metrictest"
	"github.com/onceq/onceq/outbox"
)

// A relay stopped during a round gives back each entry it did not take
// once: the failed head of a lane with its error, the entries held back
// behind it as waiting on it, the rest of the other lanes as unsent;
// only the head's give-back counts as a failed attempt.
func TestRelayStoppedAfterAFailureGivesBackEachEntryOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore(t)
		ctx, cancel := context.WithCancel(t.Context())
		sender := &recordingSender{fail: func(e outbox.Entry, _ int) error {
			cancel()
			if e.OrderingKey == "k" {
				return errMoment
			}
			return nil
		}}
		reader, mp := metrictest.Provider(t)
		commit(t, db, "in", msg("q", "k", "1"), msg("q", "k", "2"), msg("q", "k", "3"), msg("q", "j", "a"), msg("q", "j", "b"))
		r, err := outbox.NewRelay(store, sender, quiet, outbox.WithMeterProvider(mp))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		if got := sender.order(); len(got) != 2 {
			t.Fatalf("sent %v, want the two lanes' heads only", got)
		}
		if n := metrictest.Counter(t, reader, "onceq.outbox.sends", attribute.String("onceq.result", "retry")); n != 4 {
			t.Errorf("retry sends = %d, want 4: the failed head, the two behind it, the other lane's second", n)
		}
		all, err := store.Entries(t.Context(), "", 0)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"in#out0": errMoment.Error(), "in#out1": "waits behind", "in#out2": "waits behind", "in#out4": "relay stopped"}
		for _, e := range all {
			w, ok := want[e.ID]
			if !ok {
				continue
			}
			attempts := 0
			if e.ID == "in#out0" {
				attempts = 1
			}
			if !strings.Contains(e.LastError, w) || e.Attempts+e.Releases != 1 || e.Attempts != attempts {
				t.Errorf("%s given back %d times (%d attempts), last for %q, want once for %q (%d attempts)",
					e.ID, e.Attempts+e.Releases, e.Attempts, e.LastError, w, attempts)
			}
		}
		if st := states(t, store)["in#out3"]; st != outbox.Dispatched {
			t.Errorf("in#out3 is %s, want DISPATCHED", st)
		}
	})
}
