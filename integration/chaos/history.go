package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

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
// after every worker stopped: what an unknown outcome became), and checks
// the whole.
func checkHistory(ctx context.Context, dir string, store dedup.Store) (*history.Report, error) {
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
	r := history.Check(h, history.Options{Timeout: historyTimeout})
	return &r, nil
}
