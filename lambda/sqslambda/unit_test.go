package sqslambda

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/retry"
)

// Records of a standard queue run concurrently, never more than
// Concurrency at once.
func TestConcurrencyBound(t *testing.T) {
	const limit = 3
	var running, peak atomic.Int32
	full := make(chan struct{})
	var once sync.Once
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if n == limit {
			once.Do(func() { close(full) })
		}
		select { // hold until the bound is reached, so the peak is seen
		case <-full:
		case <-time.After(5 * time.Second):
		}
		return consumer.Result{}, nil
	})
	f, err := New(memstoretest.New(t), h, Concurrency(limit))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	for i := range 10 {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: string(rune('a' + i)), Body: string(rune('a' + i)),
			EventSourceARN: "arn:aws:sqs:us-east-1:1:q"})
	}
	resp, err := f.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%+v %v", resp, err)
	}
	if p := peak.Load(); p != limit {
		t.Fatalf("at most %d handlers ran at once, want exactly the bound %d", p, limit)
	}
}

// misconfiguredStore fails every claim as a deployment fault would.
type misconfiguredStore struct{ dedup.Store }

func (misconfiguredStore) Claim(context.Context, dedup.ClaimRequest) (dedup.Claim, error) {
	return dedup.Claim{}, retry.WithClass(errors.New("table not found"), retry.Misconfigured)
}

// A Misconfigured outcome fails the invocation; no record is reported.
func TestMisconfiguredFailsInvocation(t *testing.T) {
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	f, err := New(misconfiguredStore{memstoretest.New(t)}, h)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "1", Body: "x"}}})
	if !errors.Is(err, consumer.ErrMisconfigured) {
		t.Fatalf("err %v, want one wrapping consumer.ErrMisconfigured", err)
	}
}

// A record not started before the margin is reported, not run.
func TestNoTimeLeft(t *testing.T) {
	var ran atomic.Int32
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		ran.Add(1)
		return consumer.Result{}, nil
	})
	f, err := New(memstoretest.New(t), h, DeadlineMargin(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := f.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "1", Body: "x"}}})
	if err != nil || len(resp.BatchItemFailures) != 1 || ran.Load() != 0 {
		t.Fatalf("resp %+v err %v ran %d; want the record reported and not run", resp, err, ran.Load())
	}
}
