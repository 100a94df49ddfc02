package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
func checkHistory(ctx context.Context, dir string, store dedup.Store, effects map[string]int, resets map[string]int) (*history.Report, []string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "worker-*.history"))
	if err != nil {
		return nil, nil, err
	}
	// -pipeline's shipping workers share the records table, under keys of
	// their own (the outbox IDs).
	ship, err := filepath.Glob(filepath.Join(dir, "ship-*.history"))
	if err != nil {
		return nil, nil, err
	}
	paths = append(paths, ship...)
	h, err := history.LoadFiles(paths...)
	if err != nil {
		return nil, nil, fmt.Errorf("worker history: %w", err)
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
		return nil, nil, fmt.Errorf("final reads: %w", err)
	}
	if err := h.Add(&final); err != nil {
		return nil, nil, fmt.Errorf("final reads: %w", err)
	}
	called := make(map[string]bool, len(h.Keys()))
	for _, k := range h.Keys() {
		called[k] = true
	}
	for k, n := range effects {
		if n > 0 && !called[k] {
			return nil, nil, fmt.Errorf("effects: key_hash %s was applied %d times and has no store call in any history", dedup.KeyHash(k), n)
		}
		h.AddEffects(k, n)
	}
	r := history.Check(h, history.Options{Timeout: historyTimeout, Resets: resets})
	return &r, pendingStories(final.Bytes(), paths), nil
}

// pendingStories are, for the first few keys whose final read found a
// PENDING record, every event of that key in the workers' histories: what
// a failed run needs to tell which calls left the record behind.
func pendingStories(final []byte, paths []string) []string {
	var keys []string
	for line := range bytes.Lines(final) {
		var e storehistory.Event
		if json.Unmarshal(line, &e) == nil && e.Kind == storehistory.KindReturn && e.Record != nil &&
			e.Record.Status == dedup.StatusPending && len(keys) < 3 {
			keys = append(keys, e.Key)
		}
	}
	stories := make([]string, 0, len(keys))
	for _, k := range keys {
		quoted, _ := json.Marshal(k)
		needle := append([]byte(`"key":`), quoted...)
		var b strings.Builder
		fmt.Fprintf(&b, "key %s (key_hash %s):", k, dedup.KeyHash(k))
		for _, path := range paths {
			data, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			for line := range bytes.Lines(data) {
				if bytes.Contains(line, needle) {
					fmt.Fprintf(&b, "\n  %s: %s", filepath.Base(path), bytes.TrimSpace(line))
				}
			}
		}
		stories = append(stories, b.String())
	}
	return stories
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
