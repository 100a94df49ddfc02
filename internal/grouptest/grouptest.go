// Package grouptest runs consumer-group members in the tests of onceq's
// Kafka sources, and counts their effects, so that a test can prove each
// effect happened exactly once.
package grouptest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	dedupmem "github.com/onceq/onceq/dedup/memory"
	"github.com/onceq/onceq/internal/testenv"
)

// Member is one consumer.Consumer over its own Source, run until Stop.
type Member struct {
	cancel context.CancelFunc
	done   chan error
}

// Start runs a consumer over src and store, keyed by the source's default
// key; the test's end stops it.
func Start(t *testing.T, src consumer.Source, store *dedupmem.Store, h consumer.Handler, opts ...consumer.Option) *Member {
	t.Helper()
	base := []consumer.Option{consumer.PendingRecheck(100 * time.Millisecond),
		consumer.DrainTimeout(5 * time.Second), consumer.WithLogger(testenv.Logger(t)), consumer.WithoutDeadLetters()}
	c, err := consumer.New(src, store, h, append(base, opts...)...)
	if err != nil {
		t.Fatalf("consumer.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Member{cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- c.Run(ctx) }()
	t.Cleanup(func() { m.Stop(t) })
	return m
}

// Stop cancels the member and waits for Run, which closes the Source.
func (m *Member) Stop(t *testing.T) {
	if m.cancel == nil {
		return
	}
	m.cancel()
	m.cancel = nil
	select {
	case err := <-m.done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("member did not stop")
	}
}

// Effects counts, per idempotency key, the writes committed with COMPLETED.
type Effects struct {
	mu    sync.Mutex
	n     map[string]int
	total atomic.Int64
}

// NewEffects returns an empty count.
func NewEffects() *Effects { return &Effects{n: map[string]int{}} }

// Write is the business write of key's effect, for a handler's Result.
func (e *Effects) Write(key string) dedupmem.Write {
	return dedupmem.Write{Apply: func() {
		e.mu.Lock()
		e.n[key]++
		e.mu.Unlock()
		e.total.Add(1)
	}}
}

// Total counts the effects applied.
func (e *Effects) Total() int64 { return e.total.Load() }

// Counts returns a copy of the effects per key.
func (e *Effects) Counts() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.n))
	for k, v := range e.n {
		out[k] = v
	}
	return out
}

// ExactlyOnce fails the test unless exactly want keys had an effect, each
// exactly once.
func (e *Effects) ExactlyOnce(t *testing.T, want int) {
	t.Helper()
	counts := e.Counts()
	if len(counts) != want {
		t.Fatalf("%d keys had an effect, want %d", len(counts), want)
	}
	for k, n := range counts {
		if n != 1 {
			t.Fatalf("key %s: effect applied %d times", k, n)
		}
	}
}
