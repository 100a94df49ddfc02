package outbox_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/attribute"

	"github.com/onceq/onceq/internal/metrictest"
	"github.com/onceq/onceq/outbox"
)

// A relay stopped during a round gives back each entry it did not take
// once: the failed head of a lane with its error, the entries held back
// behind it as waiting on it, the rest of the other lanes as unsent.
func TestRelayStoppedAfterAFailureGivesBackEachEntryOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, store := newStore()
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
			if w, ok := want[e.ID]; ok && (!strings.Contains(e.LastError, w) || e.Attempts != 1) {
				t.Errorf("%s given back %d times, last for %q, want once for %q", e.ID, e.Attempts, e.LastError, w)
			}
		}
		if st := states(t, store)["in#out3"]; st != outbox.Dispatched {
			t.Errorf("in#out3 is %s, want DISPATCHED", st)
		}
	})
}
