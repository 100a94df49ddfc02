package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/outbox"
)

// countingLeases counts the Lease calls that returned entries.
type countingLeases struct {
	outbox.Store
	leased atomic.Int32
}

func (s *countingLeases) Lease(ctx context.Context, req outbox.LeaseRequest) ([]outbox.Entry, error) {
	got, err := s.Store.Lease(ctx, req)
	if len(got) > 0 {
		s.leased.Add(1)
	}
	return got, err
}

type senderFunc func(ctx context.Context, entries []outbox.Entry) []error

func (f senderFunc) Send(ctx context.Context, entries []outbox.Entry) []error { return f(ctx, entries) }

// After a full batch, the relay leases the next one while the first is
// still being sent, and the two lanes' entries each keep their order: the
// second batch holds none of the lanes the first one holds.
func TestRelayLeasesTheNextBatchWhileOneIsSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, ob := newStore(t)
		for i := range 4 {
			commit(t, mem, fmt.Sprintf("in-%d", i), msg("q", "a", fmt.Sprintf("a%d", i)), msg("q", fmt.Sprintf("u%d", i), "u"))
		}
		store := &countingLeases{Store: ob}
		release := make(chan struct{})
		var calls atomic.Int32
		var leasedBeside, held atomic.Bool
		var mu sync.Mutex
		var laneA []string // lane a's bodies, as sent
		sender := senderFunc(func(ctx context.Context, entries []outbox.Entry) []error {
			calls.Add(1)
			if store.leased.Load() >= 2 && held.CompareAndSwap(false, true) {
				// Hold the first batch of Run's loop (Run's own first
				// pass is sent alone) until the relay leased again.
				<-release
			}
			mu.Lock()
			for _, e := range entries {
				if e.OrderingKey == "a" {
					laneA = append(laneA, string(e.Body))
				}
			}
			mu.Unlock()
			return make([]error, len(entries))
		})
		relay, err := outbox.NewRelay(store, sender, outbox.BatchSize(2), quiet)
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, relay)
		synctest.Wait()
		leasedAt := store.leased.Load()
		leasedBeside.Store(leasedAt >= 3)
		close(release)
		synctest.Wait()
		time.Sleep(5 * time.Second) // the bubble's clock: the loop polls again, and again
		synctest.Wait()
		stop()
		if !leasedBeside.Load() {
			t.Errorf("the relay leased no batch while one was being sent (%d leases, %d sends); want the next leased beside it", leasedAt, calls.Load())
		}
		if want := []string{"a0", "a1", "a2", "a3"}; !slices.Equal(laneA, want) {
			t.Errorf("lane a sent as %v; want %v", laneA, want)
		}
		sent, err := ob.Entries(t.Context(), outbox.Dispatched, 0)
		if err != nil || len(sent) != 8 {
			t.Fatalf("dispatched: %d, %v; want 8", len(sent), err)
		}
	})
}
