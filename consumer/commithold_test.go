package consumer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/memsource"
)

// holdLimited is a source whose commit a message can hold (a Kafka
// source's kind), recording the bound the consumer gives it.
type holdLimited struct {
	*memsource.Source
	limit atomic.Int64
}

// Attach takes the hold's bound, as the Kafka sources do.
func (h *holdLimited) Attach(rt broker.Runtime) { h.limit.Store(int64(rt.CommitHold)) }

// TestCommitHoldBoundFromRetention: before receiving, the consumer tells
// the Source (Attach) to stop at 3/4 of Retention, so that the records completed
// behind a held message still live when it is replayed.
func TestCommitHoldBoundFromRetention(t *testing.T) {
	q := memsourcetest.NewQueue(t, "hold")
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("m")})
	src := &holdLimited{Source: q.Source()}
	var handled atomic.Int32
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		handled.Add(1)
		return consumer.Result{}, nil
	})
	c, err := consumer.New(src, memstoretest.New(t), h, consumer.Retention(8*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { return handled.Load() == 1 })
	if got := time.Duration(src.limit.Load()); got != 6*time.Hour {
		t.Fatalf("commit hold bound %v, want 6h (3/4 of Retention 8h)", got)
	}
}
