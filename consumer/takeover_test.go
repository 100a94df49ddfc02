package consumer_test

import (
	"context"
	"errors"
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

// crashLoop runs one message through a fresh Guard per worker process,
// each over the same store, the first hangs runs of its handler never
// returning (as a process that died mid-run never settles); each next
// worker comes once the abandoned lease can be taken over. It returns the
// outcome of the worker after the last hang, the handler's runs, and the
// store's record of the key. The hung handlers return once it is done.
func crashLoop(t *testing.T, hangs int, opts ...consumer.GuardOption) (consumer.Outcome, int, dedup.Record) {
	t.Helper()
	store := memstoretest.New(t)
	release := make(chan struct{})
	var runs atomic.Int32
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		if int(runs.Add(1)) <= hangs {
			<-release // ignores ctx: the lease is left to run out
			return consumer.Result{}, errors.New("returned far too late")
		}
		return consumer.Result{Response: []byte("done")}, nil
	})
	msg := func() *consumer.Message {
		return &consumer.Message{ID: "m", Body: []byte("body"), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "crash"}, Deliveries: 1}
	}
	var hung sync.WaitGroup
	defer func() { close(release); hung.Wait() }()
	guard := func() *consumer.Guard {
		g, err := consumer.NewGuard(store, h, append([]consumer.GuardOption{consumer.WithoutCompletedCache(),
			consumer.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for i := range hangs {
		g := guard()
		hung.Go(func() { g.Process(context.Background(), msg()) })
		synctest.Wait()
		if got := int(runs.Load()); got != i+1 {
			t.Fatalf("worker %d: handler runs %d, want %d", i+1, got, i+1)
		}
		// Renewals stop once the handler overran; the lease then ends, and
		// the next worker's claim waits out the skew margin too.
		time.Sleep(3 * time.Minute)
	}
	o := guard().Process(context.Background(), msg())
	r, err := store.Get(context.Background(), "onceq#crash")
	if err != nil {
		t.Fatal(err)
	}
	return o, int(runs.Load()), r
}

// A message whose handler never returns is taken over, counted, and once
// its lease was abandoned more than MaxTakeovers times it is
// dead-lettered with a reason that says so, its handler not run again.
func TestAbandonedLeaseDeadLetteredAfterMaxTakeovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o, runs, r := crashLoop(t, 3, consumer.MaxTakeovers(2))
		if o.Kind != consumer.DeadLettered || !errors.Is(o.Err, consumer.ErrTakeoversExhausted) {
			t.Fatalf("outcome after 3 abandoned runs, MaxTakeovers 2: %v (%v), want dead-lettered, takeovers exhausted", o.Kind, o.Err)
		}
		if reason := o.Reason(); !strings.Contains(reason, "abandoned 3 times") {
			t.Fatalf("dead-letter reason %q does not say the lease was abandoned 3 times", reason)
		}
		if runs != 3 {
			t.Fatalf("handler ran %d times, want 3 (none after the bound)", runs)
		}
		if r.Status != dedup.StatusFailed || r.Takeovers != 0 || r.Attempts != 0 {
			t.Fatalf("record after the dead letter %+v, want FAILED with its counts reset for a redrive", r)
		}
	})
}

// With the default bound, a message taken over DefaultMaxTakeovers times
// still runs, and completes.
func TestDefaultMaxTakeoversRunsAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o, runs, r := crashLoop(t, consumer.DefaultMaxTakeovers)
		if o.Kind != consumer.Processed || string(o.Response) != "done" {
			t.Fatalf("outcome after %d abandoned runs: %v (%v), want processed", consumer.DefaultMaxTakeovers, o.Kind, o.Err)
		}
		if runs != consumer.DefaultMaxTakeovers+1 || r.Takeovers != consumer.DefaultMaxTakeovers || r.Status != dedup.StatusCompleted {
			t.Fatalf("handler ran %d times, record %+v; want %d runs and the takeovers counted", runs, r, consumer.DefaultMaxTakeovers+1)
		}
	})
}

func TestMaxTakeoversRefusesLessThanOne(t *testing.T) {
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	_, err := consumer.NewGuard(memstoretest.New(t), h, consumer.MaxTakeovers(0))
	if !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), "MaxTakeovers 0") {
		t.Fatalf("MaxTakeovers(0): %v, want ErrInvalidConfig naming the option", err)
	}
}
