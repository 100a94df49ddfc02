package consumer_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/cache"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// billingGuards are two Guards on store, counting runs: one in namespace
// "invoice" whose every message is tenant "billing", and one without a
// tenant in namespace ns.
func billingGuards(t *testing.T, store dedup.Store, runs *atomic.Int32, ns string) (tenanted, plain *consumer.Guard) {
	t.Helper()
	tenanted, err := consumer.NewGuard(store, countingHandler(runs), consumer.Namespace("invoice"),
		consumer.WithTenantFunc(func(*consumer.Message) (string, error) { return "billing", nil }))
	if err != nil {
		t.Fatal(err)
	}
	if plain, err = consumer.NewGuard(store, countingHandler(runs), consumer.Namespace(ns)); err != nil {
		t.Fatal(err)
	}
	return tenanted, plain
}

// A tenant's key and another namespace's key are two records: tenant
// "billing" with namespace "invoice" and key "123", and namespace
// "billing" with key "invoice#123", once stored one key
// ("billing#invoice#123"), and the second message was answered with the
// first's response. Both run, with the cache on and off.
func TestTenantKeyIsNotAnotherNamespacesKey(t *testing.T) {
	for _, cached := range []bool{false, true} {
		var store dedup.Store = memstoretest.New(t)
		if cached {
			store = cache.Wrap(store, 100, 0)
		}
		var runs atomic.Int32
		tenanted, plain := billingGuards(t, store, &runs, "billing")
		// One body, so that the payload check cannot tell them apart.
		first := &consumer.Message{ID: "1", Body: []byte("invoice 123"),
			Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "123"}}
		second := &consumer.Message{ID: "2", Body: []byte("invoice 123"),
			Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "invoice#123"}}
		if o := tenanted.Process(t.Context(), first); o.Kind != consumer.Processed {
			t.Fatalf("cache %v: first message %v (%v)", cached, o.Kind, o.Err)
		}
		o := plain.Process(t.Context(), second)
		if o.Kind != consumer.Processed {
			t.Fatalf("cache %v: second message %v with response %q, want it processed", cached, o.Kind, o.Response)
		}
		if n := runs.Load(); n != 2 {
			t.Fatalf("cache %v: handler ran %d times, want 2", cached, n)
		}
	}
}

// What an upgrade finds: a record a tenant's message was stored under
// before TenantMark ("<tenant>#<namespace>#<key>") is not found by the
// new encoding, so its redelivery is processed again; a record without a
// tenant keeps its key, and its redelivery is still a duplicate.
func TestTenantKeyUpgrade(t *testing.T) {
	store := memstoretest.New(t)
	now := time.Now()
	for _, old := range []string{"billing#invoice#123", "orders#o-1"} {
		cl, err := store.Claim(t.Context(), dedup.ClaimRequest{Key: old, PayloadHash: dedup.PayloadHash([]byte("body")), Owner: "old", Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil || !cl.Acquired {
			t.Fatalf("%q: %+v %v", old, cl, err)
		}
		if err := store.Complete(t.Context(), dedup.CompleteRequest{Lease: cl.Lease, Response: []byte("old"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	var runs atomic.Int32
	tenanted, plain := billingGuards(t, store, &runs, "orders")
	m := func(key string) *consumer.Message {
		return &consumer.Message{ID: key, Body: []byte("body"), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: key}}
	}
	if o := tenanted.Process(t.Context(), m("123")); o.Kind != consumer.Processed {
		t.Fatalf("a tenant's message stored before the upgrade: %v, want processed again (a new key)", o.Kind)
	}
	if o := plain.Process(t.Context(), m("o-1")); o.Kind != consumer.Duplicate || string(o.Response) != "old" {
		t.Fatalf("a message without a tenant stored before the upgrade: %v %q, want its duplicate", o.Kind, o.Response)
	}
}
