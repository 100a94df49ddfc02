package consumer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/metrictest"
)

type expiredLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *expiredLog) OnClaimExpiredPresent(_ context.Context, _ *consumer.Message, previous string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, previous)
}

// A takeover of an expired record still stored is reported (hook and
// onceq.dedup.expired_present) in one-round-trip mode as in claim-first.
func TestExpiredPresentReportedInEveryMode(t *testing.T) {
	for _, oneShot := range []bool{false, true} {
		reader, mp := metrictest.Provider(t)
		clock := &manualClock{now: time.Now()}
		log := &expiredLog{}
		opts := []consumer.GuardOption{consumer.WithClock(clock), consumer.Retention(time.Hour), consumer.WithHooks(log), consumer.WithMeterProvider(mp)}
		if oneShot {
			opts = append(opts, consumer.OneRoundTrip())
		}
		h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
			return consumer.Result{Response: []byte("ok")}, nil
		})
		g, err := consumer.NewGuard(memstoretest.New(t), h, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if o := g.Process(t.Context(), keyedMessage()); o.Kind != consumer.Processed {
				t.Fatalf("one round trip %v: %v (%v)", oneShot, o.Kind, o.Err)
			}
			clock.Advance(2 * time.Hour) // past retention, still stored
		}
		got := metrictest.Counter(t, reader, "onceq.dedup.expired_present", attribute.String("onceq.previous_status", "COMPLETED"))
		if len(log.seen) != 1 || log.seen[0] != "COMPLETED" || got != 1 {
			t.Fatalf("one round trip %v: hook saw %v, metric %d; want one COMPLETED", oneShot, log.seen, got)
		}
	}
}
