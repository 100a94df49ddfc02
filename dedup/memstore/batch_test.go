package memstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// inserts are the batch cases' business writes: a set of ids, each Write
// refused when its id is already in it.
func inserts(*testing.T, dedup.Store) storetest.Inserts {
	var (
		mu  sync.Mutex
		ids = map[string]bool{}
	)
	has := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return ids[id]
	}
	return storetest.Inserts{
		Insert: func(id string) dedup.Write {
			return memstore.Write{
				Check: func() error {
					if has(id) {
						return errors.New("already inserted")
					}
					return nil
				},
				Apply: func() {
					mu.Lock()
					defer mu.Unlock()
					ids[id] = true
				},
			}
		},
		Inserted: func(_ *testing.T, id string) bool { return has(id) },
	}
}

// A key a batch claimed with its payload hash is, to a per-message Guard
// over the same Store that meets the message again, a duplicate: its
// handler does not run.
func TestBatchKeyDuplicateToGuard(t *testing.T) {
	st := memstoretest.New(t)
	bs := st.Offsets()
	ctx := context.Background()
	p := batch.Partition{Group: "g", Topic: "orders", Partition: 0}
	l, err := bs.Acquire(ctx, p, "m")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("order 42")
	key, err := dedup.Key("orders", "order-42")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := bs.Commit(ctx, batch.Commit{Lease: l, From: 0, Next: 1, Keys: []string{key}, PayloadHashes: []string{dedup.PayloadHash(body)},
		Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	ran := false
	g, err := consumer.NewGuard(st, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		ran = true
		return consumer.Result{}, nil
	}), consumer.Namespace("orders"))
	if err != nil {
		t.Fatal(err)
	}
	m := &consumer.Message{Body: body, Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "order-42"}}
	if o := g.Process(ctx, m); o.Kind != consumer.Duplicate || ran {
		t.Fatalf("the message of a key a batch claimed: outcome %v (%v), handler ran %v; want a duplicate, not run", o.Kind, o.Err, ran)
	}
}
