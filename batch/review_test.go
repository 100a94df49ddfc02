package batch_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// reviewForeignWrite is a write of another Store's kind: a batch handler
// written for PostgreSQL run over the in-memory store.
type reviewForeignWrite struct{}

func (reviewForeignWrite) WriteKind() dedup.WriteKind { return "pgstore" }

// A batch whose writes are of another Store's kind is the deployment's
// fault, as it is per message: Run stops with an error saying so, nothing
// is committed and no record is dead-lettered. It must not be retried as
// an outage until the context ends.
func TestReviewBatchForeignWriteStopsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstoretest.New(t)
		h := func(_ context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
			return []dedup.Write{memstore.Write{}, reviewForeignWrite{}}, nil
		}
		r := newRunner(t, store.Offsets(), h)
		l, err := r.Acquire(t.Context(), part, "m1")
		if err != nil {
			t.Fatal(err)
		}
		f := newFeed()
		f.ch <- record(0, "a")
		close(f.ch)
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		err = r.Run(ctx, l, f)
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run retried a foreign write as an outage for an hour: %v", err)
		}
		if !errors.Is(err, dedup.ErrUnsupportedWrite) {
			t.Fatalf("Run: %v, want an error saying the write is of another Store", err)
		}
		f.mu.Lock()
		dead := f.dead
		f.mu.Unlock()
		if len(dead) != 0 {
			t.Fatalf("dead-lettered %v for the deployment's fault", dead)
		}
		if row, err := store.Offsets().Offset(t.Context(), part); err != nil || row.Next != -1 {
			t.Fatalf("offset row %+v, %v; want nothing committed (next -1)", row, err)
		}
	})
}

// nilOffsets is a Store's batch view left unset: its Capabilities hand
// over a nil *nilOffsets in a non-nil dedup.Offsets.
type nilOffsets struct {
	rows map[dedup.Partition]dedup.OffsetLease
}

func (o *nilOffsets) Acquire(_ context.Context, p dedup.Partition, _ string) (dedup.OffsetLease, error) {
	return o.rows[p], nil
}
func (o *nilOffsets) Commit(context.Context, dedup.OffsetCommit) error { return nil }
func (o *nilOffsets) Offset(_ context.Context, p dedup.Partition) (dedup.OffsetLease, error) {
	return o.rows[p], nil
}

// A nil view or a nil HandlerFunc behind a non-nil interface is refused at
// NewRunner, as a nil one is, instead of crashing the partition's goroutine
// at its first Acquire or batch.
func TestReviewNewRunnerRefusesNilPointers(t *testing.T) {
	var view *nilOffsets
	if _, err := batch.NewRunner(view, batch.HandlerFunc(offsets)); !errors.Is(err, batch.ErrInvalidConfig) {
		t.Errorf("NewRunner with a nil *nilOffsets: %v, want ErrInvalidConfig", err)
	}
	var h batch.HandlerFunc
	if _, err := batch.NewRunner(memstoretest.New(t).Offsets(), h); !errors.Is(err, batch.ErrInvalidConfig) {
		t.Errorf("NewRunner with a nil HandlerFunc: %v, want ErrInvalidConfig", err)
	}
}
