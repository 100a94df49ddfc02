package batch_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// Over a real Store: batch mode's keys are per-message mode's, so a
// business message a per-message consumer completed is dropped by batch
// mode, and a key batch mode claimed is found COMPLETED by a per-message
// claim.
func TestKeysShareThePerMessageScheme(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstoretest.New(t)
		ctx := t.Context()
		now := time.Now()
		done, err := dedup.Key("orders", "a")
		if err != nil {
			t.Fatal(err)
		}
		c, err := store.Claim(ctx, dedup.ClaimRequest{Key: done, Owner: "per-message", Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil || !c.Acquired {
			t.Fatalf("Claim: %+v, %v", c, err)
		}
		if err := store.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}

		var mu sync.Mutex
		var applied []string
		h := func(_ context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
			var ws []dedup.Write
			for _, m := range msgs {
				k := m.Attributes[broker.IdempotencyKeyAttribute]
				ws = append(ws, memstore.Write{Apply: func() {
					mu.Lock()
					applied = append(applied, k)
					mu.Unlock()
				}})
			}
			return ws, nil
		}
		r := newRunner(t, store.Offsets(), h, batch.DedupKeys("orders"), batch.MaxRecords(3))
		f := newFeed()
		l, err := r.Acquire(ctx, part, "m1")
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r, l, f)
		for i, k := range []string{"a", "b", "c"} {
			m := record(int64(i), k)
			m.Attributes = map[string]string{broker.IdempotencyKeyAttribute: k}
			f.ch <- m
		}
		synctest.Wait()
		_ = stop()
		if !slices.Equal(applied, []string{"b", "c"}) {
			t.Fatalf("applied %v, want b and c (a was completed per message)", applied)
		}
		row, err := store.Offsets().Offset(ctx, part)
		if err != nil || row.Next != 3 {
			t.Fatalf("stored row %+v, %v; want next 3", row, err)
		}
		b, _ := dedup.Key("orders", "b")
		c, err = store.Claim(ctx, dedup.ClaimRequest{Key: b, Owner: "per-message", Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil || c.Acquired {
			t.Fatalf("a per-message claim of a key batch mode completed: %+v, %v; want not acquired", c, err)
		}
	})
}

// A key batch mode claimed is, to a per-message Guard keyed as the Kafka
// sources key (the header, else the record's fingerprint), a duplicate:
// the batch stored the payload hash the Guard compares.
func TestBatchKeysAreDuplicatesToAGuard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstoretest.New(t)
		r := newRunner(t, store.Offsets(), offsetWrites, batch.DedupKeys("orders"), batch.MaxRecords(2))
		f := newFeed()
		l, err := r.Acquire(t.Context(), part, "m1")
		if err != nil {
			t.Fatal(err)
		}
		headed := record(0, "order a")
		headed.Attributes = map[string]string{broker.IdempotencyKeyAttribute: "a"}
		plain := record(1, "order b")
		stop := running(t, r, l, f)
		f.ch <- headed
		f.ch <- plain
		synctest.Wait()
		_ = stop()
		ran := 0
		g, err := consumer.NewGuard(store, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
			ran++
			return consumer.Result{}, nil
		}), consumer.Namespace("orders"), consumer.WithSourceKey(broker.Fingerprint, broker.FingerprintCoversBody))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []*broker.Message{headed, plain} {
			if o := g.Process(t.Context(), m); o.Kind != consumer.Duplicate {
				t.Errorf("%s: outcome %v (%v), want a duplicate of the batch's", m.ID, o.Kind, o.Err)
			}
		}
		if ran != 0 {
			t.Fatalf("the Guard ran %d messages batch mode had completed", ran)
		}
	})
}

// offsetWrites writes nothing: the keys are what is claimed.
func offsetWrites(context.Context, []*broker.Message) ([]dedup.Write, error) { return nil, nil }
