package storetest_test

import (
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/dedup/storetest"
)

// A Store adapter proves itself by running the suite from a test of its
// own, with a constructor that gives each subtest a Store (the suite's
// keys are random, so one table can serve every subtest). Since an
// example cannot be given a *testing.T, this one is compiled, not run:
// in the adapter's _test.go file the function below is
// `func TestConformance(t *testing.T)`. The in-memory store stands in for
// the adapter's own.
func ExampleRun() {
	conformance := func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) dedup.Store {
			store, err := memstore.New()
			if err != nil {
				t.Fatal(err)
			}
			return store
		}, storetest.Options{
			// A store over a network sizes the one-key claim race down.
			// One that retries throttles itself also sets Throttled, to a
			// Store whose next calls meet a throttle (a fault-injecting
			// proxy in front of its server), so the suite can prove that
			// the consumer hears of them.
			RaceGoroutines: 16, RaceRounds: 20,
			// The nil values of the store's own write types, each of
			// which Complete must refuse (a nil interface is always
			// tried), and the response limit the stores were given.
			NilWrites:       []dedup.Write{(*memstore.Write)(nil)},
			MaxResponseSize: dedup.DefaultMaxResponseSize,
		})
	}
	_ = conformance
}
