package consumer_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/cache"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// A namespace holding the separator is refused when the Guard is built:
// Namespace("shop#eu") + "o-1" and Namespace("shop") + "eu#o-1" would be
// one record (issue 26.4 b).
func TestNamespaceWithSeparatorRefused(t *testing.T) {
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	_, err := consumer.NewGuard(memstoretest.New(t), h, consumer.Namespace("shop#eu"))
	var ne *dedup.NamespaceError
	if !errors.Is(err, consumer.ErrInvalidConfig) || !errors.Is(err, dedup.ErrBadNamespace) || !errors.As(err, &ne) {
		t.Fatalf("NewGuard with namespace shop#eu: %v, want ErrInvalidConfig with a *dedup.NamespaceError", err)
	}
}

// countingHandler counts its runs and answers with the body.
func countingHandler(n *atomic.Int32) consumer.Handler {
	return consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		n.Add(1)
		return consumer.Result{Response: m.Body}, nil
	})
}

// A producer's key equal to another message's derived key (the body's
// hash; a Kafka fingerprint) names another record: both messages are
// processed, with the cache on and off (issue 27.3).
func TestProducerKeyCannotPoseAsDerivedKey(t *testing.T) {
	for _, cached := range []bool{false, true} {
		var store dedup.Store = memstoretest.New(t)
		if cached {
			store = cache.Wrap(store, 100, 0)
		}
		var runs atomic.Int32
		g, err := consumer.NewGuard(store, countingHandler(&runs))
		if err != nil {
			t.Fatal(err)
		}
		victim := &consumer.Message{ID: "v", Body: []byte("victim order")}
		forger := &consumer.Message{ID: "f", Body: []byte("forged"),
			Attributes: map[string]string{consumer.IdempotencyKeyAttribute: dedup.PayloadHash(victim.Body)}}
		for _, m := range []*consumer.Message{victim, forger, victim} {
			g.Process(t.Context(), m)
		}
		if o := g.Process(t.Context(), forger); o.Kind != consumer.Duplicate || string(o.Response) != "forged" {
			t.Fatalf("cache %v: the forger's redelivery %v with %q, want its own duplicate", cached, o.Kind, o.Response)
		}
		if n := runs.Load(); n != 2 {
			t.Fatalf("cache %v: handler ran %d times, want 2 (victim and forger once each)", cached, n)
		}
	}
}

// A record stored with no payload hash is never "the same payload" as a
// message that has one: it is not answered as a duplicate, from the store
// or from the cache (issue 27.3).
func TestMissingStoredHashIsNotTheSamePayload(t *testing.T) {
	for _, cached := range []bool{false, true} {
		mem := memstoretest.New(t)
		key, _ := dedup.Key("onceq", "o-1")
		now := time.Now()
		c, err := mem.Claim(t.Context(), dedup.ClaimRequest{Key: key, Owner: "old", Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil || !c.Acquired {
			t.Fatal(c, err)
		}
		if err := mem.Complete(t.Context(), dedup.CompleteRequest{Lease: c.Lease, Response: []byte("old"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		var store dedup.Store = mem
		if cached {
			store = cache.Wrap(mem, 100, 0)
		}
		var runs atomic.Int32
		g, err := consumer.NewGuard(store, countingHandler(&runs))
		if err != nil {
			t.Fatal(err)
		}
		m := func() *consumer.Message {
			return &consumer.Message{ID: "m", Body: []byte("order"), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "o-1"}}
		}
		for i := range 2 { // the second time, from the cache when on
			if o := g.Process(t.Context(), m()); o.Kind != consumer.KeyReuse {
				t.Fatalf("cache %v, delivery %d: %v with %q, want key_reuse", cached, i+1, o.Kind, o.Response)
			}
		}
	}
}

// A COMPLETED record past its retention, still stored, is a new message:
// attempt 1 each time, never "attempts exhausted" (issue 26.2), on the
// in-memory store as on DynamoDB.
func TestCompletedPastRetentionIsANewMessage(t *testing.T) {
	var runs atomic.Int32
	clock := &manualClock{now: time.Now()}
	g, err := consumer.NewGuard(memstoretest.New(t), countingHandler(&runs), consumer.WithClock(clock), consumer.MaxAttempts(2),
		consumer.Retention(2*time.Minute), consumer.WithoutCompletedCache())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if o := g.Process(t.Context(), keyedMessage()); o.Kind != consumer.Processed || o.Attempt != 1 {
			t.Fatalf("delivery %d: %v attempt %d (%v), want processed on attempt 1", i+1, o.Kind, o.Attempt, o.Err)
		}
		clock.Advance(3 * time.Minute)
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want 3", n)
	}
}
