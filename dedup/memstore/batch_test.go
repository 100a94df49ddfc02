package memstore_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/dedup/storetest"
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
		Insert: func(id string) any {
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
