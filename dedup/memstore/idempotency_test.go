package memstore_test

import (
	"sync"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/idempotency/idemtest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// The Idempotency-Key middleware over the in-memory store, its business
// writes applied to a map in the commit.
func TestIdempotencyKey(t *testing.T) {
	idemtest.Run(t, func(*testing.T) dedup.Store { return memstoretest.New(t) }, idemtest.Options{
		Effect: func(*testing.T, dedup.Store) idemtest.Effect {
			var mu sync.Mutex
			applied := map[string]int{}
			return idemtest.Effect{
				Write: func(id string) dedup.Write {
					return memstore.Write{Apply: func() { mu.Lock(); applied[id]++; mu.Unlock() }}
				},
				Count: func(_ *testing.T, id string) int { mu.Lock(); defer mu.Unlock(); return applied[id] },
			}
		},
	})
}
