package cache_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/cache"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) dedup.Store { return cache.Wrap(memstoretest.New(t), 100, 0) })
}

// counting counts the calls that reach the store behind the cache.
type counting struct {
	*memstore.Store
	claims atomic.Int64
}

func (c *counting) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, req)
}

func TestDuplicatesOfCompletedMakeNoCall(t *testing.T) {
	ctx := context.Background()
	inner := &counting{Store: memstoretest.New(t)}
	c := cache.Wrap(inner, 10, 0)
	now := time.Now()
	cl, err := c.Claim(ctx, dedup.ClaimRequest{Key: "k", PayloadHash: "h", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !cl.Acquired {
		t.Fatal(cl, err)
	}
	if err := c.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Response: []byte("r"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		d, err := c.Claim(ctx, dedup.ClaimRequest{Key: "k", PayloadHash: "h", Owner: "b", Now: now.Add(time.Duration(i) * time.Second), LeaseUntil: now.Add(time.Hour)})
		if err != nil || d.Acquired || d.Existing.Status != dedup.StatusCompleted || string(d.Existing.Response) != "r" || d.Existing.PayloadHash != "h" {
			t.Fatalf("duplicate %d: %+v %v", i, d, err)
		}
	}
	if n := inner.claims.Load(); n != 1 {
		t.Fatalf("%d claims reached the store, want only the first", n)
	}
	// After the record's expiry the cache no longer answers.
	late, err := c.Claim(ctx, dedup.ClaimRequest{Key: "k", PayloadHash: "h", Owner: "c", Now: now.Add(2 * time.Hour), LeaseUntil: now.Add(3 * time.Hour)})
	if err != nil || !late.Acquired || inner.claims.Load() != 2 {
		t.Fatalf("claim after expiry: %+v %v (store claims %d)", late, err, inner.claims.Load())
	}
	if s := c.Stats(); s.Hits != 3 || s.Misses != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestNeverCachesPendingOrFailed(t *testing.T) {
	ctx := context.Background()
	inner := &counting{Store: memstoretest.New(t)}
	c := cache.Wrap(inner, 10, 0)
	now := time.Now()
	cl, _ := c.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
	for range 2 {
		if d, _ := c.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: "b", Now: now, LeaseUntil: now.Add(time.Minute)}); d.Existing.Status != dedup.StatusPending {
			t.Fatalf("saw %s", d.Existing.Status)
		}
	}
	_ = c.Fail(ctx, dedup.FailRequest{Lease: cl.Lease, Now: now, RetryAt: now.Add(time.Minute)})
	if d, _ := c.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: "b", Now: now, LeaseUntil: now.Add(time.Minute)}); d.Existing.Status != dedup.StatusFailed {
		t.Fatalf("saw %s after Fail", d.Existing.Status)
	}
	if inner.claims.Load() != 4 || c.Stats().Entries != 0 {
		t.Fatalf("claims %d, entries %d: PENDING or FAILED was cached", inner.claims.Load(), c.Stats().Entries)
	}
}

func TestBoundedByEntriesAndBytes(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	for _, bound := range []struct{ entries, bytes int }{{5, 1 << 20}, {1000, 5 * (1024 + 200)}} {
		c := cache.Wrap(memstoretest.New(t), bound.entries, bound.bytes)
		for i := range 50 {
			k := fmt.Sprint("k", i)
			cl, _ := c.Claim(ctx, dedup.ClaimRequest{Key: k, Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
			_ = c.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Response: make([]byte, 1024), Now: now, ExpiresAt: now.Add(time.Hour)})
		}
		s := c.Stats()
		if s.Entries > 5 || s.Bytes > bound.bytes || s.Evictions < 45 {
			t.Fatalf("bound %+v: stats %+v", bound, s)
		}
	}
}

// noOneShot is a Store that declares no one-round-trip claim.
type noOneShot struct{ dedup.Store }

func (noOneShot) Capabilities() dedup.Capabilities { return dedup.Capabilities{} }

func TestCapabilitiesPassedThrough(t *testing.T) {
	if !cache.Wrap(memstoretest.New(t), 0, 0).Capabilities().ClaimComplete {
		t.Fatal("the cache hides the store's one-round-trip claim")
	}
	if cache.Wrap(noOneShot{memstoretest.New(t)}, 0, 0).Capabilities().ClaimComplete {
		t.Fatal("the cache claims a one-round-trip claim its store lacks")
	}
}

func TestGetAllocatesNothing(t *testing.T) {
	c, err := cache.New(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c.Put("ns#k", dedup.Record{Key: "stored form", Status: dedup.StatusCompleted, PayloadHash: "h", Response: []byte("r"), ExpiresAt: now.Add(time.Hour)}, now)
	c.Put("ns#pending", dedup.Record{Status: dedup.StatusPending, ExpiresAt: now.Add(time.Hour)}, now)
	if r, ok := c.Get("ns#k", now); !ok || r.Key != "ns#k" || string(r.Response) != "r" || r.PayloadHash != "h" {
		t.Fatalf("lookup: %+v %v", r, ok)
	}
	if _, ok := c.Get("ns#other", now); ok {
		t.Fatal("a key never completed was found")
	}
	if _, ok := c.Get("ns#pending", now); ok {
		t.Fatal("a PENDING record was cached")
	}
	if n := testing.AllocsPerRun(100, func() { c.Get("ns#k", now) }); n != 0 {
		t.Fatalf("a hit allocates %v times", n)
	}
	if _, ok := c.Get("ns#k", now.Add(2*time.Hour)); ok {
		t.Fatal("an expired record was found")
	}
	if st := c.Stats(); st.Hits != 102 || st.Misses != 3 {
		t.Fatalf("stats %+v, want 102 hits and 3 misses", st)
	}
}

func TestShardedBoundsAndRecency(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	const bound = 4096
	c := cache.Wrap(memstoretest.New(t), bound, 0)
	complete := func(k string) {
		cl, err := c.Claim(ctx, dedup.ClaimRequest{Key: k, Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil || !cl.Acquired {
			t.Fatalf("claim %s: %+v %v", k, cl, err)
		}
		if err := c.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	complete("hot")
	for i := range 4 * bound {
		complete(fmt.Sprint("k", i))
		if i%64 == 0 {
			// Looked up often: the clock passes it over.
			if _, err := c.Claim(ctx, dedup.ClaimRequest{Key: "hot", Owner: "b", Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := c.Stats()
	if s.Entries > bound || s.Entries < bound/2 || s.Evictions < 3*bound {
		t.Fatalf("stats %+v, bound %d", s, bound)
	}
	hits := s.Hits
	if d, _ := c.Claim(ctx, dedup.ClaimRequest{Key: "hot", Owner: "c", Now: now, LeaseUntil: now.Add(time.Minute)}); d.Acquired || c.Stats().Hits != hits+1 {
		t.Fatalf("the key looked up often was evicted: %+v", d)
	}
}

// An entry answers for at most MaxAge after it was cached: a record the
// store no longer holds (an operator's delete) is answered from the cache
// within that bound, and by the store after it (issue 26.5).
func TestEntryAgeIsBounded(t *testing.T) {
	ctx := context.Background()
	inner := &counting{Store: memstoretest.New(t)}
	c := cache.Wrap(inner, 10, 0, cache.MaxAge(5*time.Second))
	now := time.Now()
	cl, err := c.Claim(ctx, dedup.ClaimRequest{Key: "k", PayloadHash: "h", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !cl.Acquired {
		t.Fatal(cl, err)
	}
	if err := c.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Response: []byte("r"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// The store forgets the record (as a delete would): Sweep past its expiry.
	inner.Sweep(now.Add(2 * time.Hour))
	claim := func(at time.Duration) dedup.Claim {
		d, err := c.Claim(ctx, dedup.ClaimRequest{Key: "k", PayloadHash: "h", Owner: "b", Now: now.Add(at), LeaseUntil: now.Add(at + time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := claim(5 * time.Second); d.Acquired {
		t.Fatalf("within MaxAge: claimed, want the cached duplicate")
	}
	if d := claim(5*time.Second + time.Millisecond); !d.Acquired {
		t.Fatalf("past MaxAge: %+v, want the store asked (and the key, deleted there, claimed)", d.Existing)
	}
}
