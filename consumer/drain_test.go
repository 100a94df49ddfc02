package consumer_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/memsource"
)

// outageOnComplete claims, but every Complete finds the store out.
type outageOnComplete struct {
	*memstore.Store
	failed chan struct{}
}

func (s outageOnComplete) Complete(context.Context, dedup.CompleteRequest) error {
	select {
	case s.failed <- struct{}{}:
	default:
	}
	return errors.New("store unreachable")
}

// A handler's result kept through a store outage (writeHeld retries while
// the lease holds) does not keep Run past DrainTimeout: the waits between
// the retries watch the drain.
func TestHeldWriteEndsWithTheDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")})
		store := outageOnComplete{Store: memstoretest.New(t), failed: make(chan struct{}, 1)}
		h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
			return consumer.Result{}, nil
		})
		const drain = 2 * time.Second
		c, err := consumer.New(q.Source(), store, h, consumer.Concurrency(1),
			consumer.LeaseTTL(30*time.Minute), consumer.FailedRetryDelay(time.Second),
			consumer.DrainTimeout(drain), consumer.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- c.Run(ctx) }()
		<-store.failed // the first Complete failed: writeHeld waits to retry
		start := time.Now()
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > drain {
			t.Fatalf("Run returned %v after the cancel, past DrainTimeout %v", took, drain)
		}
	})
}
