package consumer_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/memsource"
)

// flakyCheckStore answers its first failures checks with a 500, as a
// store busy for a moment at start-up does, then passes.
type flakyCheckStore struct {
	dedup.Store
	failures atomic.Int32
	checks   atomic.Int32
}

func (s *flakyCheckStore) Check(ctx context.Context) error {
	s.checks.Add(1)
	if s.failures.Add(-1) >= 0 {
		return apiError{"InternalServerError"}
	}
	return s.Store.Check(ctx)
}

// A store that fails its start-up check for the moment is checked again
// until CheckTimeout, and the consumer then runs; one that stays down
// through CheckTimeout, or is missing, still stops Run.
func TestStoreCheckRetriedThroughAMomentaryFault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "check-retry")
		_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("valid")})
		store := &flakyCheckStore{Store: memstoretest.New(t)}
		store.failures.Store(2)
		handled := make(chan struct{})
		h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
			close(handled)
			return consumer.Result{}, nil
		})
		c, err := consumer.New(q.Source(), store, h, consumer.CheckTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		select {
		case <-handled:
		case err := <-done:
			t.Fatalf("Run = %v before the message was handled, want it to check the store again", err)
		case <-time.After(time.Minute): // in the bubble: fake time
			t.Fatal("the message was not handled within a minute")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v after the store came back, want nil", err)
		}
		if n := store.checks.Load(); n != 3 {
			t.Fatalf("%d checks, want 3 (two failures, then a pass)", n)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "check-down")
		store := &flakyCheckStore{Store: memstoretest.New(t)}
		store.failures.Store(1 << 30)
		c, err := consumer.New(q.Source(), store, noopHandler(), consumer.CheckTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := c.Run(context.Background()); !errors.Is(err, consumer.ErrMisconfigured) {
			t.Fatalf("Run = %v with the store down throughout, want ErrMisconfigured", err)
		}
		if took := time.Since(start); took < 5*time.Second || store.checks.Load() < 5 {
			t.Fatalf("gave up after %v and %d checks, want CheckTimeout (5s) of checks a second apart", took, store.checks.Load())
		}
	})
}
