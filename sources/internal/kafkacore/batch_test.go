package kafkacore

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// flaky fails its first Acquires, then is the memory store's batch view.
type flaky struct {
	batch.Store
	fails int
}

func (f *flaky) Acquire(ctx context.Context, p batch.Partition, member string) (batch.Lease, error) {
	if f.fails > 0 {
		f.fails--
		return batch.Lease{}, errors.New("store unavailable")
	}
	return f.Store.Acquire(ctx, p, member)
}

func newBatching(t *testing.T, s batch.Store) *Batching[int64] {
	t.Helper()
	r, err := batch.NewRunner(s, batch.HandlerFunc(func(context.Context, []*broker.Message) ([]dedup.Write, error) { return nil, nil }),
		batch.MaxRecords(2))
	if err != nil {
		t.Fatal(err)
	}
	d := &Dispatcher[int64, struct{}]{}
	d.Init()
	tel, err := NewTelemetry(noop.NewMeterProvider(), "test", "g", []string{"t"}, "", d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Unregister() })
	return &Batching[int64]{Runner: r, Group: "g", Queue: 4, Tel: tel, Logger: slog.New(slog.DiscardHandler),
		ToMessage: func(m *broker.Message, off int64, _ int) {
			*m = broker.Message{ID: "t/0/" + strconv.FormatInt(off, 10), Origin: broker.Origin{System: "kafka", Destination: "t", Offset: off}}
		}}
}

// Taking a partition's offset row is tried again while the Store fails:
// the partition never starts from the group's offset instead.
func TestBatchingAcquireRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBatching(t, &flaky{Store: memstoretest.New(t).Offsets(), fails: 3})
		l, err := b.Acquire(t.Context(), "t", 0, "m1")
		if err != nil || l.Token != 1 {
			t.Fatalf("Acquire: %+v, %v; want the row taken after the failures", l, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		b = newBatching(t, &flaky{Store: memstoretest.New(t).Offsets(), fails: 1 << 30})
		if _, err := b.Acquire(ctx, "t", 0, "m1"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire with a Store that never answers: %v, want ctx's end", err)
		}
	})
}

// A feed's records reach the Runner and commit, with the group's offset
// following; once the Runner stopped, a push is dropped, not blocked.
func TestBatchFeed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstoretest.New(t).Offsets()
		b := newBatching(t, store)
		var committed []int64
		b.Hooks.Commit = append(b.Hooks.Commit, commitHook(func(off int64) { committed = append(committed, off) }))
		l, err := b.Acquire(t.Context(), "t", 0, "m1")
		if err != nil {
			t.Fatal(err)
		}
		groups := []int64{}
		f := b.Feed(l, func(_ context.Context, next int64) error { groups = append(groups, next); return nil })
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { b.Run(ctx, f); close(done) }()
		if !f.PushAll(ctx, []int64{0, 1}, time.Now()) {
			t.Fatal("a fetch's push refused while running")
		}
		for off := int64(2); off < 4; off++ {
			if !f.Push(ctx, off, time.Now()) {
				t.Fatalf("push %d refused while running", off)
			}
		}
		synctest.Wait()
		cancel()
		<-done
		if f.Push(t.Context(), 4, time.Now()) {
			t.Fatal("a push after the Runner stopped was taken")
		}
		if f.PushAll(t.Context(), []int64{4, 5}, time.Now()) {
			t.Fatal("a fetch's push after the Runner stopped was taken")
		}
		row, err := store.Offset(t.Context(), l.Partition)
		if err != nil || row.Next != 4 || len(groups) != 2 || groups[1] != 4 || len(committed) != 2 {
			t.Fatalf("stored %+v (%v), group commits %v, commit hooks %v; want next 4, two of each", row, err, groups, committed)
		}
		if err := f.DeadLetter(t.Context(), &broker.Message{ID: "t/0/1", Handle: int64(1)}, "bad"); !errors.Is(err, kafkagroup.ErrNoDeadLetterTopic) {
			t.Fatalf("DeadLetter with no topic: %v, want ErrNoDeadLetterTopic", err)
		}
	})
}

type commitHook func(off int64)

func (h commitHook) OnKafkaCommit(_ context.Context, _ string, _ int32, off int64) { h(off) }
