package consumer

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/sources/memsource"
)

// Kept apart from constructions_bench_test.go: this one reaches into the
// pool itself.

// BenchmarkPoolShards runs the memory pipeline (16 workers, one op one
// message, as BenchmarkMemoryPipeline) with the pool's held messages in
// shards as newPool makes them, and under one lock (a single shard).
func BenchmarkPoolShards(b *testing.B) {
	for _, impl := range []string{"sharded", "oneLock"} {
		b.Run("impl="+impl, func(b *testing.B) {
			runPipeline(b, 16, func(r *pool) {
				if impl == "oneLock" {
					r.shards = []poolShard{{held: map[*slot]struct{}{}, keys: map[orderKey][]*slot{}}}
				}
			})
		})
	}
}

// runPipeline drains b.N messages through a Consumer of the memory source
// and store, edit changing its pool before it serves.
func runPipeline(b *testing.B, workers int, edit func(*pool)) {
	b.Helper()
	q := memsource.NewQueue("bench")
	body := make([]byte, 256)
	for i := range b.N {
		copy(body, strconv.Itoa(i))
		if err := q.Send(context.Background(), memsource.Outgoing{Body: append([]byte(nil), body...)}); err != nil {
			b.Fatal(err)
		}
	}
	resp := []byte("ok")
	h := HandlerFunc(func(context.Context, *Message) (Result, error) { return Result{Response: resp}, nil })
	c, err := New(q.Source(), memstore.New(), h, Concurrency(workers), MaxInFlight(max(64, 4*workers)))
	if err != nil {
		b.Fatal(err)
	}
	r := newPool(c)
	edit(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	report := cpuPerOp(b)
	go func() { done <- r.serve(ctx) }()
	for q.Stats().Acked < b.N {
		time.Sleep(200 * time.Microsecond)
	}
	b.StopTimer()
	report()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLimiterPipeline runs the memory pipeline (16 workers) with the
// limiter open, as it is while nothing constrains it, and held closed
// (every acquire and release under its lock, as before it had an open
// state): the limit stays at its maximum, but a throttle an hour ahead
// keeps it from opening.
func BenchmarkLimiterPipeline(b *testing.B) {
	for _, impl := range []string{"open", "locked"} {
		b.Run("impl="+impl, func(b *testing.B) {
			var l *limiter
			runPipeline(b, 16, func(r *pool) {
				l = r.limiter
				if impl == "locked" {
					l.mu.Lock()
					l.open.Store(false)
					l.max++ // never reached: no growth while throttled
					l.lastThrottle = time.Now().Add(time.Hour)
					l.mu.Unlock()
				}
			})
			if impl == "locked" && l.open.Load() {
				b.Fatal("the limiter opened: the comparison is void")
			}
		})
	}
}
