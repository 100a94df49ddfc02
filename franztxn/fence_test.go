package franztxn_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/franztxn"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// A worker whose transactional ID another producer takes over while its
// transaction is open (a zombie: stalled, then replaced) commits nothing
// of it, and Run returns ErrFenced; the worker that goes on produces each
// input's output exactly once.
func TestFencedWorkerCommitsNothing(t *testing.T) {
	addr := brokerAddr(t)
	in, out, group := names(t)
	createTopic(t, addr, in, 2)
	createTopic(t, addr, out, 1)
	const total = 200
	produceInputs(t, addr, in, 0, total)
	committed := newReader(t, addr, out, true)
	uncommitted := newReader(t, addr, out, false)

	stalled, release := make(chan struct{}), make(chan struct{})
	var handled atomic.Int32
	ok := fanOut(out, 1)
	c := &counter{}
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		// Stall once some transactions committed and this one has
		// produced outputs.
		if n, _, _, _ := c.get(); n >= 2 && handled.Add(1) == 6 {
			close(stalled)
			<-release
		}
		return ok.Handle(ctx, m)
	})
	zombie := start(t, addr, group, in, group+"-x", h, franztxn.MaxPollRecords(20), franztxn.Concurrency(1), franztxn.WithHooks(c))
	select {
	case <-stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker never stalled")
	}
	admin := client(t, addr)
	testenv.Eventually(t, 10*time.Second, "the open transaction's outputs written", func() bool {
		return openTransaction(t, admin, out, 1)
	})

	// Another producer takes the transactional ID over.
	scratch := grouptest.TopicName(t, "scratch")
	createTopic(t, addr, scratch, 1)
	thief := client(t, addr, kgo.TransactionalID(group+"-x"), kgo.DefaultProduceTopic(scratch))
	if err := thief.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := thief.ProduceSync(testenv.Context(t, 10*time.Second), &kgo.Record{Value: []byte("thief")}).FirstErr(); err != nil {
		t.Fatalf("the thief's produce: %v", err)
	}
	if err := thief.EndTransaction(testenv.Context(t, 10*time.Second), kgo.TryAbort); err != nil {
		t.Fatalf("the thief's abort: %v", err)
	}
	close(release)
	if err := zombie.wait(t, 30*time.Second); !errors.Is(err, franztxn.ErrFenced) {
		t.Fatalf("the zombie's Run: %v, want ErrFenced", err)
	}
	start(t, addr, group, in, group+"-y", fanOut(out, 1))
	testenv.Eventually(t, 60*time.Second, "every output read", func() bool { return committed.outputs() >= total })
	exactlyOnce(t, finish(t, addr, out, 1, committed), total, 1)
	testenv.Eventually(t, 10*time.Second, "the zombie's aborted outputs read uncommitted", func() bool { return uncommitted.outputs() > total })
}
