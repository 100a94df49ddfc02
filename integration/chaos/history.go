package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/examples/storehistory"
	"github.com/onceq/onceq/integration/history"
)

// historyTimeout bounds the linearizability search of one key; a key left
// undecided is reported as such, never waited for.
const historyTimeout = 10 * time.Second

// historyPath is the history file of worker i's gen'th process.
func historyPath(dir string, i, gen int) string {
	return filepath.Join(dir, fmt.Sprintf("worker-%d-%d.history", i, gen))
}

// checkHistory reads the history of every worker process in dir (the
// shipping workers' too), adds a
// final read of every key it holds (through store, straight to the table,
// after every worker stopped: what an unknown outcome became) and the
// business effects counted by key (nil: none are), and checks the whole.
// An effect under a key no call was made for is an error of the run's
// bookkeeping, not of the store.
//
// resets counts, by key_hash, the records onceq redrive reset outside the
// histories (nil: none).
func checkHistory(ctx context.Context, dir string, store dedup.Store, effects map[string]int, resets map[string]int) (*history.Report, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "worker-*.history"))
	if err != nil {
		return nil, err
	}
	// -pipeline's shipping workers share the records table, under keys of
	// their own (the outbox IDs).
	ship, err := filepath.Glob(filepath.Join(dir, "ship-*.history"))
	if err != nil {
		return nil, err
	}
	paths = append(paths, ship...)
	h, err := history.LoadFiles(paths...)
	if err != nil {
		return nil, fmt.Errorf("worker history: %w", err)
	}
	var final bytes.Buffer
	rec := storehistory.New(store, &final)
	keys := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for k := range keys {
				_, _ = rec.Get(ctx, k) // an error is recorded as an unknown read
			}
		})
	}
	for _, k := range h.Keys() {
		keys <- k
	}
	close(keys)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("final reads: %w", err)
	}
	if err := h.Add(&final); err != nil {
		return nil, fmt.Errorf("final reads: %w", err)
	}
	called := make(map[string]bool, len(h.Keys()))
	for _, k := range h.Keys() {
		called[k] = true
	}
	for k, n := range effects {
		if n > 0 && !called[k] {
			return nil, fmt.Errorf("effects: key_hash %s was applied %d times and has no store call in any history", dedup.KeyHash(k), n)
		}
		h.AddEffects(k, n)
	}
	r := history.Check(h, history.Options{Timeout: historyTimeout, Resets: resets})
	return &r, nil
}

// offsetsPath is batch mode's offset-row history file of worker i's
// gen'th process.
func offsetsPath(dir string, i, gen int) string {
	return filepath.Join(dir, fmt.Sprintf("worker-%d-%d.offsets", i, gen))
}

// checkOffsets reads batch mode's offset-row histories in dir, adds a
// final read of every partition's row (through store, after every worker
// stopped) and each partition's log end, which the row must have reached,
// and checks the whole.
func checkOffsets(ctx context.Context, dir string, store dedup.Store, b *kafkaBroker) (*history.OffsetReport, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "worker-*.offsets"))
	if err != nil {
		return nil, err
	}
	h, err := history.LoadOffsetFiles(paths...)
	if err != nil {
		return nil, fmt.Errorf("worker offsets history: %w", err)
	}
	offsets := store.Capabilities().Offsets
	if offsets == nil {
		return nil, fmt.Errorf("the %T store keeps no offset rows", store)
	}
	ends, err := b.ends(ctx, b.topic)
	if err != nil {
		return nil, err
	}
	var final bytes.Buffer
	rec := storehistory.NewOffsets(offsets, &final)
	for p, end := range ends {
		part := batch.Partition{Group: b.group, Topic: b.topic, Partition: int32(p)}
		_, _ = rec.Offset(ctx, part) // an error is recorded as an unknown read
		h.SetEnd(part.String(), end)
	}
	if err := rec.Err(); err != nil {
		return nil, err
	}
	if err := h.Add(&final); err != nil {
		return nil, fmt.Errorf("final reads: %w", err)
	}
	r := history.CheckOffsets(h, history.Options{Timeout: historyTimeout})
	return &r, nil
}
