package consumer

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

func TestOwnersUniqueAcrossGoroutines(t *testing.T) {
	g, err := NewGuard(memstoretest.New(t), HandlerFunc(func(context.Context, *Message) (Result, error) { return Result{}, nil }))
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 1000
	got := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				got[w] = append(got[w], g.nextOwner())
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, owners := range got {
		for _, o := range owners {
			if seen[o] || !strings.HasPrefix(o, g.ownerID) || len(o) == len(g.ownerID) {
				t.Fatalf("owner %q: repeated or malformed (prefix %q)", o, g.ownerID)
			}
			seen[o] = true
		}
	}
}
