package idempotency_test

import (
	"context"
	"errors"
	"testing"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/idempotency"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

type reviewPGWrite struct{}

func (reviewPGWrite) WriteKind() dedup.WriteKind { return "pgstore" }

// reviewEmbedded borrows memstore's kind by embedding its write.
type reviewEmbedded struct{ memstore.Write }

// Writes of two Stores in one Tx, or a write that borrows the Store's
// kind, commit nothing and are the deployment's fault: the call fails
// with an error that is not the key's (no record left that would answer
// a repeat), and once mended, the same key runs.
func TestReviewTxForeignWritesCommitNothing(t *testing.T) {
	for name, foreign := range map[string]dedup.Write{"other kind": reviewPGWrite{}, "borrowed kind": reviewEmbedded{}} {
		t.Run(name, func(t *testing.T) {
			r := newRunner(t, memstoretest.New(t))
			applied := 0
			_, err := r.Do(t.Context(), "k", []byte("p"), func(_ context.Context, tx *idempotency.Tx) ([]byte, error) {
				return []byte("ok"), tx.Write(memstore.Write{Apply: func() { applied++ }}, foreign)
			})
			var we *consumer.WriteTypeError
			if err == nil || (!errors.As(err, &we) && !errors.Is(err, dedup.ErrUnsupportedWrite)) {
				t.Fatalf("Do with a foreign write: %v, want the write refused", err)
			}
			if applied != 0 {
				t.Fatalf("the Store's own write applied %d times beside a refused one", applied)
			}
			res, err := r.Do(t.Context(), "k", []byte("p"), func(_ context.Context, tx *idempotency.Tx) ([]byte, error) {
				return []byte("mended"), tx.Write(memstore.Write{Apply: func() { applied++ }})
			})
			if err != nil || string(res.Response) != "mended" || res.Replayed || applied != 1 {
				t.Fatalf("Do once mended: %+v, %v (applied %d); want the function run and its write applied", res, err, applied)
			}
		})
	}
}
