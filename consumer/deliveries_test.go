package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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

// wholeSeconds is a Store that keeps time as DynamoDB does: expiries in
// whole seconds rounded up, a claim's Now in whole seconds rounded down.
type wholeSeconds struct{ *memstore.Store }

func ceilSecond(t time.Time) time.Time {
	if f := t.Truncate(time.Second); !f.Equal(t) {
		return f.Add(time.Second)
	}
	return t
}

func (s wholeSeconds) Claim(ctx context.Context, r dedup.ClaimRequest) (dedup.Claim, error) {
	r.Now, r.LeaseUntil = r.Now.Truncate(time.Second), ceilSecond(r.LeaseUntil)
	return s.Store.Claim(ctx, r)
}

func (s wholeSeconds) Complete(ctx context.Context, r dedup.CompleteRequest) error {
	r.ExpiresAt = ceilSecond(r.ExpiresAt)
	return s.Store.Complete(ctx, r)
}

func (s wholeSeconds) Fail(ctx context.Context, r dedup.FailRequest) error {
	r.RetryAt = ceilSecond(r.RetryAt)
	return s.Store.Fail(ctx, r)
}

func (s wholeSeconds) Extend(ctx context.Context, r dedup.ExtendRequest) error {
	r.LeaseUntil = ceilSecond(r.LeaseUntil)
	return s.Store.Extend(ctx, r)
}

type outcomeLog struct {
	mu       sync.Mutex
	got      []string
	receives int // the source's delivery count of the last message seen
}

func (l *outcomeLog) OnMessageOutcome(_ context.Context, m *consumer.Message, o consumer.Outcome, _ time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprintf("%v(%d)", o.Kind, o.Attempt))
	l.receives = m.Deliveries
}

// A handler that always fails, on a store keeping whole seconds, is
// delivered once per failed attempt: each retry comes when the FAILED
// record can be claimed, not a second early (which costs a delivery that
// finds the record FAILED and is put back). onceq check's redrive count
// assumes exactly this.
func TestOneDeliveryPerFailedAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")})
		h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
			time.Sleep(300 * time.Millisecond) // off the whole second
			return consumer.Result{}, errors.New("boom")
		})
		log := &outcomeLog{}
		c, err := consumer.New(q.Source(), wholeSeconds{memstoretest.New(t)}, h, consumer.Concurrency(1),
			consumer.FailedRetryDelay(time.Second), consumer.MaxAttempts(3), consumer.WithHooks(log),
			consumer.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- c.Run(ctx) }()
		for q.Stats().DeadLettered == 0 {
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprint([]string{"retrying(1)", "retrying(2)", "dead_lettered(3)"})
		if got := fmt.Sprint(log.got); got != want {
			t.Fatalf("outcomes %s, want %s: one delivery per failed attempt", got, want)
		}
		// What ReceivesNeeded (onceq check's redrive count) counts for
		// the attempts: one receive each.
		if need := consumer.ReceivesNeeded(3, 0, time.Minute); log.receives != need {
			t.Fatalf("dead-lettered on receive %d, ReceivesNeeded says %d", log.receives, need)
		}
	})
}
