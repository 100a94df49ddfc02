package idempotency_test

import (
	"context"
	"errors"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/idempotency"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// The function's writes are handed over on its Tx, typed, not through its
// context: they commit with the response, and a Tx kept past its
// function takes nothing more.
func TestTxWritesCommitWithResponse(t *testing.T) {
	r := newRunner(t, memstoretest.New(t))
	applied := 0
	var kept *idempotency.Tx
	fn := func(_ context.Context, tx *idempotency.Tx) ([]byte, error) {
		kept = tx
		var w dedup.Write = memstore.Write{Apply: func() { applied++ }}
		return []byte("ok"), tx.Write(w)
	}
	for range 2 {
		if res, err := r.Do(t.Context(), "tx-key", []byte("p"), fn); err != nil || string(res.Response) != "ok" {
			t.Fatalf("Do = %+v, %v", res, err)
		}
	}
	if applied != 1 {
		t.Fatalf("the write applied %d times, want once", applied)
	}
	if err := kept.Write(memstore.Write{Apply: func() { applied++ }}); !errors.Is(err, idempotency.ErrNotInCall) {
		t.Fatalf("Write on a Tx whose function returned: %v, want ErrNotInCall", err)
	}
	if err := kept.OnRejected([]byte("no")); !errors.Is(err, idempotency.ErrNotInCall) {
		t.Fatalf("OnRejected on a Tx whose function returned: %v, want ErrNotInCall", err)
	}
}
