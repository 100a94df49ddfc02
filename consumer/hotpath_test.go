package consumer_test

import (
	"context"
	"testing"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// A duplicate of a key completed before is answered by the cache with no
// store call, whether keyed by its body or by an idempotency-key
// attribute; another payload under a cached key is still
// key reuse.
func TestCachedDuplicateCostsNothing(t *testing.T) {
	store := &countingStore{Store: memstoretest.New(t)}
	g, err := consumer.NewGuard(store, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("ok")}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	byBody := &consumer.Message{ID: "1", Body: []byte("body"), Deliveries: 1}
	byAttr := &consumer.Message{ID: "2", Body: []byte("other"), Deliveries: 1,
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "k-2"}}
	for _, m := range []*consumer.Message{byBody, byAttr} {
		if o := g.Process(ctx, m); o.Kind != consumer.Processed {
			t.Fatalf("first: %v %v", o.Kind, o.Err)
		}
	}
	if st, _ := g.CacheStats(); st.Misses != 2 || st.Hits != 0 {
		t.Fatalf("two new keys: cache stats %+v, want 2 misses and no hit", st)
	}
	calls := store.calls.Load()
	for _, m := range []*consumer.Message{byBody, byAttr} {
		key := m.IdempotencyKey
		m.IdempotencyKey = ""
		o := g.Process(ctx, m)
		if o.Kind != consumer.Duplicate || string(o.Response) != "ok" || o.IdempotencyKey != key || m.IdempotencyKey != key {
			t.Fatalf("duplicate of %s: %+v (message key %q, want %q)", m.ID, o, m.IdempotencyKey, key)
		}
		g.Process(ctx, m)
	}
	if n := store.calls.Load() - calls; n != 0 {
		t.Fatalf("%d store calls for cached duplicates", n)
	}
	reused := &consumer.Message{ID: "3", Body: []byte("changed"), Deliveries: 1,
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "k-2"}}
	if o := g.Process(ctx, reused); o.Kind != consumer.KeyReuse {
		t.Fatalf("another payload under a cached key: %v, want key reuse", o.Kind)
	}
}

// With a KeyFunc the key is made first, then looked up: a cached
// duplicate still makes no store call.
func TestCachedDuplicateWithKeyFunc(t *testing.T) {
	store := &countingStore{Store: memstoretest.New(t)}
	g, err := consumer.NewGuard(store, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("ok")}, nil
	}), consumer.WithKeyFunc(func(m *consumer.Message) (string, error) { return m.ID, nil }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if o := g.Process(ctx, &consumer.Message{ID: "a", Body: []byte("x")}); o.Kind != consumer.Processed {
		t.Fatalf("first: %v", o.Kind)
	}
	calls := store.calls.Load()
	if o := g.Process(ctx, &consumer.Message{ID: "a", Body: []byte("x")}); o.Kind != consumer.Duplicate || string(o.Response) != "ok" {
		t.Fatalf("duplicate: %+v", o)
	}
	if o := g.Process(ctx, &consumer.Message{ID: "a", Body: []byte("other")}); o.Kind != consumer.KeyReuse {
		t.Fatalf("another payload: %v, want key reuse", o.Kind)
	}
	if n := store.calls.Load() - calls; n != 0 {
		t.Fatalf("%d store calls for cached answers", n)
	}
	if st, _ := g.CacheStats(); st.Hits != 2 || st.Misses != 1 {
		t.Fatalf("cache stats %+v, want 2 hits and 1 miss", st)
	}
}
