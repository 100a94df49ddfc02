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
