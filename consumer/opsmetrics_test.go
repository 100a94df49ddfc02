package consumer_test

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/metrictest"
	"github.com/onceq/onceq/sources/memsource"
)

// Each claim that takes over an abandoned lease is counted in
// onceq.takeovers; a first claim is not.
func TestTakeoversCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := metrictest.Provider(t)
		o, _, _ := crashLoop(t, 2, consumer.WithMeterProvider(mp))
		if o.Kind != consumer.Processed {
			t.Fatalf("outcome after 2 abandoned runs: %v (%v)", o.Kind, o.Err)
		}
		if got := metrictest.Counter(t, reader, "onceq.takeovers"); got != 2 {
			t.Fatalf("onceq.takeovers = %d after two abandoned leases, want 2", got)
		}
	})
}

// onceq.in_flight.oldest_age reports how long the oldest held message has
// been held.
func TestOldestInFlightAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := metrictest.Provider(t)
		q := memsourcetest.NewQueue(t, "orders")
		if err := q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")}); err != nil {
			t.Fatal(err)
		}
		started, release := make(chan struct{}), make(chan struct{})
		h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
			close(started)
			<-release
			return consumer.Result{}, nil
		})
		c, err := consumer.New(q.Source(), memstoretest.New(t), h, consumer.Concurrency(1), consumer.LeaseTTL(time.Hour), consumer.HandlerTimeout(10*time.Minute),
			consumer.WithMeterProvider(mp), consumer.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- c.Run(ctx) }()
		<-started
		time.Sleep(2 * time.Minute) // synctest's clock: the handler holds the message
		age, ok := metrictest.Gauge(t, reader, "onceq.in_flight.oldest_age")
		if !ok || age < (2*time.Minute).Seconds() || age > (3*time.Minute).Seconds() {
			t.Fatalf("onceq.in_flight.oldest_age = %v (reported %v) with a message held 2 minutes", age, ok)
		}
		close(release)
		synctest.Wait()
		if n := metrictest.Counter(t, reader, "onceq.messages", attribute.String("onceq.outcome", "processed")); n != 1 {
			t.Fatalf("processed %d once released, want 1", n)
		}
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
}
