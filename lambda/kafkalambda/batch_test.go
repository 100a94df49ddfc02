package kafkalambda_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/lambda/kafkalambda"
)

// applied counts each record's effect, by ID, through memstore writes.
type applied struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *applied) handler(fail string) batch.HandlerFunc {
	return func(_ context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
		ws := make([]dedup.Write, len(msgs))
		for i, m := range msgs {
			if string(m.Body) == fail {
				return nil, errors.New("refused")
			}
			id := m.ID
			ws[i] = memstore.Write{Apply: func() { a.mu.Lock(); a.n[id]++; a.mu.Unlock() }}
		}
		return ws, nil
	}
}

func event(partitions, records int) events.KafkaEvent {
	ev := events.KafkaEvent{Records: map[string][]events.KafkaRecord{}}
	for p := range partitions {
		for o := range records {
			ev.Records["orders-"+strconv.Itoa(p)] = append(ev.Records["orders-"+strconv.Itoa(p)], events.KafkaRecord{
				Topic: "orders", Partition: int64(p), Offset: int64(o),
				Value: base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "v%d-%d", p, o))})
		}
	}
	return ev
}

func newBatchFunction(t *testing.T, store *memstore.Store, h batch.HandlerFunc, opts ...kafkalambda.Option) *kafkalambda.BatchFunction {
	t.Helper()
	r, err := batch.NewRunner(store.Offsets(), h, batch.MaxRecords(4), batch.MaxAttempts(1), batch.RetryDelay(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	f, err := kafkalambda.NewBatch(r, "orders-fn", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Every record of an event's partitions commits with its partition's
// offset; the same event again (Lambda retrying it) runs nothing twice.
func TestBatchFunctionExactlyOnce(t *testing.T) {
	store := memstoretest.New(t)
	a := &applied{n: map[string]int{}}
	f := newBatchFunction(t, store, a.handler(""))
	for range 2 {
		resp, err := f.Handle(context.Background(), event(3, 10))
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("Handle: %+v, %v; want no failures", resp, err)
		}
	}
	if len(a.n) != 30 {
		t.Fatalf("%d records had an effect, want 30", len(a.n))
	}
	for id, n := range a.n {
		if n != 1 {
			t.Fatalf("%s applied %d times", id, n)
		}
	}
	for p := range 3 {
		row, err := store.Offsets().Offset(context.Background(), batch.Partition{Group: "orders-fn", Topic: "orders", Partition: int32(p)})
		if err != nil || row.Next != 10 {
			t.Fatalf("partition %d: stored %+v, %v; want next 10", p, row, err)
		}
	}
}

// A record that fails its attempts is dead-lettered when there is a
// destination and its neighbours commit; without one it is reported, and
// the records before it commit.
func TestBatchFunctionFailingRecord(t *testing.T) {
	for _, withDLQ := range []bool{true, false} {
		t.Run(fmt.Sprintf("dead-letters=%v", withDLQ), func(t *testing.T) {
			store := memstoretest.New(t)
			a := &applied{n: map[string]int{}}
			var dead []string
			var opts []kafkalambda.Option
			if withDLQ {
				opts = append(opts, kafkalambda.WithDeadLetters(kafkalambda.DeadLetterFunc(func(_ context.Context, m *consumer.Message, _ string) error {
					dead = append(dead, m.ID)
					return nil
				})))
			}
			f := newBatchFunction(t, store, a.handler("v0-5"), opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := f.Handle(ctx, event(1, 8))
			if err != nil {
				t.Fatal(err)
			}
			if withDLQ {
				if len(resp.BatchItemFailures) != 0 || !slices.Equal(dead, []string{"orders/0/5"}) || len(a.n) != 7 {
					t.Fatalf("failures %+v, dead letters %v, %d effects; want none, orders/0/5, 7", resp.BatchItemFailures, dead, len(a.n))
				}
				return
			}
			want := kafkalambda.ItemIdentifier{Partition: "orders-0", Offset: 5}
			if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != want || len(a.n) != 5 {
				t.Fatalf("failures %+v, %d effects; want offset 5 reported, the 5 before it applied", resp.BatchItemFailures, len(a.n))
			}
		})
	}
}

// NewBatch refuses what batch mode cannot take.
func TestNewBatchInvalid(t *testing.T) {
	r, err := batch.NewRunner(memstoretest.New(t).Offsets(), batch.HandlerFunc(func(context.Context, []*broker.Message) ([]dedup.Write, error) { return nil, nil }))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r     *batch.Runner
		group string
		opts  []kafkalambda.Option
	}{{nil, "g", nil}, {r, "", nil}, {r, "g", []kafkalambda.Option{kafkalambda.WithGuardOptions(consumer.Namespace("x"))}}} {
		if _, err := kafkalambda.NewBatch(c.r, c.group, c.opts...); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Fatalf("NewBatch: %v, want ErrInvalidConfig", err)
		}
	}
}
