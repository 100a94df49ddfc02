package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storetest"
)

// colliding is a Store whose every key hashes alike, so all keys share one
// chain: the chain, not the hash, must tell keys apart.
func colliding(t testing.TB) *Store {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	s.hash = func(string) uint64 { return 7 }
	return s
}

func TestConformanceWithCollidingHashes(t *testing.T) {
	storetest.Run(t, func(t *testing.T) dedup.Store { return colliding(t) })
}

func TestSweepKeepsLiveKeysOfACollidingChain(t *testing.T) {
	s := colliding(t)
	ctx := context.Background()
	now := time.Now()
	for i := range 6 {
		// Even keys expire at now+1s, odd ones an hour later.
		until := now.Add(time.Second)
		if i%2 == 1 {
			until = now.Add(time.Hour)
		}
		if c, err := s.Claim(ctx, dedup.ClaimRequest{Key: "k" + strconv.Itoa(i), Owner: "o", Now: now, LeaseUntil: until}); err != nil || !c.Acquired {
			t.Fatalf("claim %d: %+v %v", i, c, err)
		}
	}
	if n := s.Sweep(now.Add(time.Minute)); n != 3 {
		t.Fatalf("swept %d records, want 3", n)
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("Len %d after the sweep, want 3", n)
	}
	for i := range 6 {
		_, err := s.Get(ctx, "k"+strconv.Itoa(i))
		if live := i%2 == 1; live != (err == nil) {
			t.Fatalf("key %d: live %v, Get error %v", i, live, err)
		}
	}
	// A swept key is claimed afresh: version 1 again.
	c, err := s.Claim(ctx, dedup.ClaimRequest{Key: "k0", Owner: "p", Now: now.Add(time.Minute), LeaseUntil: now.Add(2 * time.Minute)})
	if err != nil || !c.Acquired || c.Lease.Version != 1 || c.Previous != nil {
		t.Fatalf("claim after sweep: %+v %v", c, err)
	}
}
