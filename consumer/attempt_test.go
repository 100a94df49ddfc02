package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
)

// Outcome.Attempt is the attempt number of the claim the processing won,
// in either store mode, and 0 when it won none: never the delivery count.
func TestOutcomeAttemptIsTheClaimsInEveryMode(t *testing.T) {
	clk := &manualClock{now: time.Unix(1_700_000_000, 0)}
	fail := true
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		if fail {
			return consumer.Result{}, errors.New("boom")
		}
		return consumer.Result{Response: []byte("ok")}, nil
	})
	for _, mode := range []struct {
		name string
		opts []consumer.GuardOption
		// what a failed handler run's outcome says: claim first, the
		// claim's number; in one round trip the handler fails before any
		// claim
		failedAttempt, processedAttempt int
	}{
		{"claim first", nil, 1, 2},
		{"one round trip", []consumer.GuardOption{consumer.OneRoundTrip()}, 0, 1},
	} {
		t.Run(mode.name, func(t *testing.T) {
			fail = true
			opts := append([]consumer.GuardOption{consumer.WithClock(clk), consumer.FailedRetryDelay(time.Second),
				consumer.WithoutCompletedCache()}, mode.opts...)
			g, err := consumer.NewGuard(memstore.New(), h, opts...)
			if err != nil {
				t.Fatal(err)
			}
			msg := func() *consumer.Message {
				return &consumer.Message{ID: "1", Body: []byte("order " + mode.name), Deliveries: 3}
			}
			if o := g.Process(t.Context(), msg()); o.Kind != consumer.Retrying || o.Attempt != mode.failedAttempt {
				t.Fatalf("failed run: %v attempt %d, want retrying attempt %d (delivery 3 is not an attempt)", o.Kind, o.Attempt, mode.failedAttempt)
			}
			clk.Advance(5 * time.Second)
			fail = false
			if o := g.Process(t.Context(), msg()); o.Kind != consumer.Processed || o.Attempt != mode.processedAttempt {
				t.Fatalf("second run: %v attempt %d, want processed attempt %d", o.Kind, o.Attempt, mode.processedAttempt)
			}
			if o := g.Process(t.Context(), msg()); o.Kind != consumer.Duplicate || o.Attempt != 0 {
				t.Fatalf("duplicate: %v attempt %d, want duplicate attempt 0 (no claim won)", o.Kind, o.Attempt)
			}
		})
	}
}
