package outbox_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/outbox"
)

// newStore is an in-memory store whose outbox the relay reads.
func newStore(t testing.TB) (*memstore.Store, outbox.Store) {
	s := memstoretest.New(t)
	return s, s.Outbox()
}

// commit completes key in one round trip with msgs as its outbox, as a
// handler's result commits.
func commit(t *testing.T, s *memstore.Store, key string, msgs ...outbox.Message) {
	t.Helper()
	now := time.Now()
	c, err := s.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: key, Owner: "worker", Now: now, ExpiresAt: now.Add(time.Hour), Outbox: msgs})
	if err != nil || !c.Acquired {
		t.Fatalf("commit %s: %+v, %v", key, c, err)
	}
}

// recordingSender records what it was sent, in each call, and fails as
// fail says.
type recordingSender struct {
	mu    sync.Mutex
	calls [][]outbox.Entry
	fail  func(e outbox.Entry, sent int) error // sent: earlier sends of e
	block chan struct{}                        // when set, Send waits for it
	stall bool                                 // wait for block alone, past ctx's end, as a stalled process does
}

func (r *recordingSender) Send(ctx context.Context, entries []outbox.Entry) []error {
	if r.block != nil && r.stall {
		<-r.block
	} else if r.block != nil {
		select {
		case <-r.block:
		case <-ctx.Done():
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := make([]error, len(entries))
	for i, e := range entries {
		if r.fail != nil {
			errs[i] = r.fail(e, r.sentLocked(e.ID))
		}
	}
	r.calls = append(r.calls, slices.Clone(entries))
	return errs
}

func (r *recordingSender) sentLocked(id string) int {
	n := 0
	for _, c := range r.calls {
		for _, e := range c {
			if e.ID == id {
				n++
			}
		}
	}
	return n
}

// order returns the IDs sent, in order, with how often each was sent.
func (r *recordingSender) order() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for _, c := range r.calls {
		for _, e := range c {
			ids = append(ids, e.ID)
		}
	}
	return ids
}
