package cache_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/cache"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// hashing is a Store that holds a key part longer than 64 bytes as its
// hash and reads records back under that stored form, as DynamoDB does
// for a key part over its attribute limit.
type hashing struct{ *memstore.Store }

func stored(k string) string {
	ns, part, _ := strings.Cut(k, "#")
	return ns + "#" + dedup.StorablePart(part, 64)
}

func (h hashing) Claim(ctx context.Context, r dedup.ClaimRequest) (dedup.Claim, error) {
	key := r.Key
	r.Key = stored(key)
	c, err := h.Store.Claim(ctx, r)
	if c.Acquired {
		c.Lease.Key = key // the caller's key, as DynamoDB's Claim returns it
	}
	return c, err
}

func (h hashing) Complete(ctx context.Context, r dedup.CompleteRequest) error {
	r.Lease.Key = stored(r.Lease.Key)
	return h.Store.Complete(ctx, r)
}

// complete claims and completes key through c with resp.
func complete(t *testing.T, c dedup.Store, key, resp string, now time.Time) {
	t.Helper()
	ctx := context.Background()
	cl, err := c.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: "o-" + resp, Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !cl.Acquired {
		t.Fatalf("claim %.40q: %+v %v", key, cl, err)
	}
	if err := c.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Response: []byte(resp), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// No two distinct (tenant, namespace, key, derived or not) tuples share a
// cache entry: a key that spells out another's stored (hashed) form is not
// answered with that key's response, nor is another namespace's key, nor
// another tenant's, nor a key with a tenant and one without.
func FuzzCacheKey(f *testing.F) {
	long := strings.Repeat("k", 100)
	hx := dedup.PayloadHash([]byte("body"))
	f.Add(false, "", "ns", long, false, false, "", "ns", dedup.HashPart(long), false)
	f.Add(false, "", "shop", "eu#o-1", false, false, "", "shop#eu", "o-1", false)
	f.Add(false, "", "ns", "a", false, false, "", "ns", "a ", false)
	f.Add(false, "", "ns", hx, true, false, "", "ns", hx, false)
	f.Add(true, "billing", "invoice", "123", false, false, "", "billing", "invoice#123", false)
	f.Add(true, "a", "b", "c", false, true, "a#b", "", "c", false)
	f.Fuzz(func(t *testing.T, tA bool, tenantA, nsA, kA string, dA bool, tB bool, tenantB, nsB, kB string, dB bool) {
		enc := func(hasTenant bool, tenant, ns, k string, derived bool) (string, error) {
			key, err := dedup.Key(ns, k)
			if derived {
				key, err = dedup.DerivedKey(ns, k)
			}
			if err != nil || !hasTenant {
				return key, err
			}
			return dedup.TenantKey(tenant, key)
		}
		a, errA := enc(tA, tenantA, nsA, kA, dA)
		b, errB := enc(tB, tenantB, nsB, kB, dB)
		if errA != nil || errB != nil || a == b || stored(a) == stored(b) {
			return // the same tuple, or the store's own collision (FuzzStoredKey)
		}
		st := hashing{memstoretest.New(t)}
		now := time.Now()
		complete(t, cache.Wrap(st, 100, 0), a, "A", now)
		// Another worker's cache learns A's record from the store; a claim
		// of B must still reach the store.
		c := cache.Wrap(st, 100, 0)
		if cl, err := c.Claim(context.Background(), dedup.ClaimRequest{Key: a, PayloadHash: "h", Owner: "x", Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil || cl.Acquired {
			t.Fatalf("duplicate of %.40q: %+v %v", a, cl, err)
		}
		cl, err := c.Claim(context.Background(), dedup.ClaimRequest{Key: b, PayloadHash: "h", Owner: "b", Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if !cl.Acquired {
			t.Fatalf("%.40q was answered with %.40q's record (response %q)", b, a, cl.Existing.Response)
		}
	})
}

// The COMPLETED record of a long key, held as its hash, is cached under
// the key itself: a key that is literally that hash is not its duplicate.
func TestCacheKeyIsTheCallersKey(t *testing.T) {
	st := hashing{memstoretest.New(t)}
	now := time.Now()
	long, _ := dedup.Key("ns", strings.Repeat("k", 100))
	complete(t, cache.Wrap(st, 100, 0), long, "long", now)
	// Another worker's cache answers a duplicate of the long key from the
	// store, and caches it.
	c := cache.Wrap(st, 100, 0)
	cl, err := c.Claim(context.Background(), dedup.ClaimRequest{Key: long, PayloadHash: "h", Owner: "x", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || cl.Acquired || string(cl.Existing.Response) != "long" {
		t.Fatalf("duplicate of the long key: %+v %v", cl, err)
	}
	posing := stored(long) // "ns#sha256:…", as a raw stored key
	cl, err = c.Claim(context.Background(), dedup.ClaimRequest{Key: posing, PayloadHash: "h", Owner: "y", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if !cl.Acquired && cl.Existing.Key != long {
		t.Fatalf("the key %q was answered from the cache entry of the long key", posing)
	}
}
