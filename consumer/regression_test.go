package consumer_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/memsource"
)

// Regression tests for failures known from other idempotency libraries,
// named after the failure; the DynamoDB store's own are in
// dedup/dynamostore/regression_test.go.

func noopHandler() consumer.Handler {
	return consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{}, nil
	})
}

// Both constructors must refuse opts with ErrInvalidConfig.
func refused(t *testing.T, opts ...consumer.GuardOption) {
	t.Helper()
	copts := make([]consumer.Option, len(opts))
	for i, o := range opts {
		copts[i] = o
	}
	if _, err := consumer.New(memsourcetest.NewQueue(t, "r").Source(), memstoretest.New(t), noopHandler(), copts...); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("New: %v, want ErrInvalidConfig", err)
	}
	if _, err := consumer.NewGuard(memstoretest.New(t), noopHandler(), opts...); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("NewGuard: %v, want ErrInvalidConfig", err)
	}
}

// A zero lease would write PENDING records already expired (every
// duplicate re-runs the handler); a negative one, records expired in the
// past. Both are refused when the consumer is built.
func TestRegression_ZeroLeaseRefused(t *testing.T) {
	refused(t, consumer.LeaseTTL(0))
}

func TestRegression_NegativeLeaseRefused(t *testing.T) {
	refused(t, consumer.LeaseTTL(-time.Second))
	refused(t, consumer.LeaseTTL(-time.Nanosecond))
}

// A lease that can expire while its handler still runs lets a second
// worker take the key over and run the side effect again. The lease must
// exceed the handler timeout by max(2s, 10%): shorter, equal, or inside
// the margin is refused; exactly the margin is accepted.
func TestRegression_LeaseShorterThanHandlerTimeoutRefused(t *testing.T) {
	refused(t, consumer.HandlerTimeout(time.Minute), consumer.LeaseTTL(30*time.Second))
	refused(t, consumer.HandlerTimeout(time.Minute), consumer.LeaseTTL(time.Minute))
	refused(t, consumer.HandlerTimeout(time.Minute), consumer.LeaseTTL(66*time.Second-time.Nanosecond))
	refused(t, consumer.HandlerTimeout(time.Second), consumer.LeaseTTL(3*time.Second-time.Nanosecond))
	refused(t, consumer.HandlerTimeout(0), consumer.LeaseTTL(time.Minute))
	if _, err := consumer.NewGuard(memstoretest.New(t), noopHandler(), consumer.HandlerTimeout(time.Minute), consumer.LeaseTTL(66*time.Second)); err != nil {
		t.Errorf("lease of the handler timeout plus its 10%% margin refused: %v", err)
	}
	if _, err := consumer.NewGuard(memstoretest.New(t), noopHandler(), consumer.HandlerTimeout(time.Second), consumer.LeaseTTL(3*time.Second)); err != nil {
		t.Errorf("lease of the handler timeout plus the 2s minimum margin refused: %v", err)
	}
}

// A handler slower than the store calls' own timeout still commits: each
// store call's deadline starts when the call does, not when the message
// was taken (a 12s handler once never committed, and ran again and again).
func TestRegression_SlowHandlerCommits(t *testing.T) {
	t.Parallel()
	q := memsourcetest.NewQueue(t, "slow")
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("slow")})
	var runs atomic.Int32
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		runs.Add(1)
		time.Sleep(11 * time.Second) // longer than a store call may take
		return consumer.Result{Response: []byte("done")}, nil
	})
	c, err := consumer.New(q.Source(), deadlineStore{memstoretest.New(t)}, h)
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { return q.Stats().Acked == 1 })
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want once", n)
	}
}

// deadlineStore fails a Complete whose context has ended, as a real
// store's client does.
type deadlineStore struct{ dedup.Store }

func (s deadlineStore) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.Complete(ctx, req)
}
