package storeinstr_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/retry"
)

// Every Guard over a store hands over its observer (Attach): each is told
// of every retry from then on, with its class, and the store logs to the
// last logger handed over, since it was given none.
func TestAttachObserversAndLogger(t *testing.T) {
	in, err := storeinstr.New(storeinstr.SystemRedis, "redisstore", code, storeinstr.Config{Policy: quick})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := make([][]retry.Class, 2)
	var first, last bytes.Buffer
	for i, buf := range []*bytes.Buffer{&first, &last} {
		in.Attach(dedup.Runtime{
			Logger: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Observe: func(c retry.Class, _ error) {
				mu.Lock()
				defer mu.Unlock()
				seen[i] = append(seen[i], c)
			},
		})
	}
	in.Attach(dedup.Runtime{}) // a Guard with no logger nor observer changes neither
	faults := []error{codeErr{"OOM", retry.Throttled}, errors.New("reset")}
	err = in.Do(t.Context(), storeinstr.OpClaim, func(_ context.Context, attempt int) error {
		if attempt <= len(faults) {
			return faults[attempt-1]
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	want := []retry.Class{retry.Throttled, retry.Transient}
	mu.Lock()
	defer mu.Unlock()
	for i, got := range seen {
		if !slices.Equal(got, want) {
			t.Errorf("observer %d of 2 told %v, want %v", i+1, got, want)
		}
	}
	if !strings.Contains(last.String(), "redisstore: retrying") || first.Len() != 0 {
		t.Errorf("logged to the first logger %q and the last %q, want the retries in the last only", first.String(), last.String())
	}
}
