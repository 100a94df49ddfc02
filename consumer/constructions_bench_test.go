package consumer

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/onceq/onceq/internal/proccpu"
)

// These benchmarks set each of the consumer's less plain constructions
// beside the plain one it replaced, in the same run, so that the figure in
// its comment can be measured again:
//
//	go test -run '^$' -bench 'SettleDeadlines|PoolShards|ShardPadding|LeaseHeartbeat' \
//	    -benchmem -cpu 1,2 -count 5 ./consumer/
//
// Each reports cpu-ns/op beside ns/op: the process's CPU time per op,
// which a machine shared with other work disturbs less.

// cpuPerOp starts counting the process's CPU time; the func it returns
// reports it per op.
func cpuPerOp(b *testing.B) func() {
	start := proccpu.Used()
	return func() { b.ReportMetric(proccpu.PerOp(start, b.N)*1000, "cpu-ns/op") }
}

// BenchmarkSettleDeadlines: a context with a deadline for a store call or
// a settle, three per message in the memory pipeline (claim, complete,
// ack), shared by the calls of one window (sharedDeadlines.get) or made
// per call (context.WithDeadline and its cancel).
func BenchmarkSettleDeadlines(b *testing.B) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("impl=shared", func(b *testing.B) {
		s := &sharedDeadlines{parent: parent, window: time.Second, after: settleTimeout + time.Second}
		defer s.stop()
		b.ReportAllocs()
		defer cpuPerOp(b)()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ctx := s.get(time.Now())
				if ctx.Err() != nil {
					b.Error("shared deadline ended early")
				}
			}
		})
	})
	b.Run("impl=withDeadline", func(b *testing.B) {
		b.ReportAllocs()
		defer cpuPerOp(b)()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ctx, cancel := context.WithDeadline(parent, time.Now().Add(settleTimeout))
				if ctx.Err() != nil {
					b.Error("deadline ended early")
				}
				cancel()
			}
		})
	})
}

// BenchmarkShardPadding: the pool's lock pattern alone (a message put in
// its shard's map, marked started, taken out: three lock rounds), from
// every core, over 64 shards padded apart as poolShard is, the same
// shards unpadded, and one lock.
func BenchmarkShardPadding(b *testing.B) {
	type padded struct {
		mu   sync.Mutex
		held map[int]struct{}
		_    [64]byte
	}
	type unpadded struct {
		mu   sync.Mutex
		held map[int]struct{}
	}
	const n = 64
	run := func(b *testing.B, lock func(i int) (*sync.Mutex, map[int]struct{})) {
		var next atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(8) // 16 goroutines on 2 cores: the pipeline's 16 workers
		defer cpuPerOp(b)()
		b.RunParallel(func(pb *testing.PB) {
			id := int(next.Add(1)) << 32
			for i := 0; pb.Next(); i++ {
				mu, held := lock(id + i)
				mu.Lock()
				held[id+i] = struct{}{}
				mu.Unlock()
				mu.Lock()
				_ = held[id+i]
				mu.Unlock()
				mu.Lock()
				delete(held, id+i)
				mu.Unlock()
			}
		})
	}
	b.Run("impl=padded", func(b *testing.B) {
		sh := make([]padded, n)
		for i := range sh {
			sh[i].held = map[int]struct{}{}
		}
		run(b, func(i int) (*sync.Mutex, map[int]struct{}) { s := &sh[(i^i>>32)&(n-1)]; return &s.mu, s.held })
	})
	b.Run("impl=unpadded", func(b *testing.B) {
		sh := make([]unpadded, n)
		for i := range sh {
			sh[i].held = map[int]struct{}{}
		}
		run(b, func(i int) (*sync.Mutex, map[int]struct{}) { s := &sh[(i^i>>32)&(n-1)]; return &s.mu, s.held })
	})
	b.Run("impl=oneLock", func(b *testing.B) {
		var mu sync.Mutex
		held := map[int]struct{}{}
		run(b, func(int) (*sync.Mutex, map[int]struct{}) { return &mu, held })
	})
}

// BenchmarkLeaseHeartbeat: the lease renewal timer of one leased handler,
// started and stopped around a handler that returns before the first
// renewal: a heartbeat and its timer reused through a sync.Pool, as
// Guard.startHeartbeat and heartbeat.stop do, or made for each handler
// (time.AfterFunc). The same fields are set either way.
func BenchmarkLeaseHeartbeat(b *testing.B) {
	// What a heartbeat holds of its attempt: a copy of attempt's size
	// (232 bytes), pointers included.
	type attemptCopy [29]unsafe.Pointer
	type beat struct {
		mu    sync.Mutex
		a     attemptCopy
		start time.Time
		timer *time.Timer
		done  bool
	}
	const every = 30 * time.Second / 3 // the default LeaseTTL's renewal
	a := &attemptCopy{}
	b.Run("impl=pooled", func(b *testing.B) {
		var pool sync.Pool
		b.ReportAllocs()
		defer cpuPerOp(b)()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				hb, _ := pool.Get().(*beat)
				if hb == nil {
					hb = &beat{}
					hb.timer = time.AfterFunc(time.Hour, func() {})
					hb.timer.Stop()
				}
				hb.mu.Lock()
				hb.a, hb.start, hb.done = *a, time.Now(), false
				hb.timer.Reset(every)
				hb.mu.Unlock()

				hb.mu.Lock()
				hb.done = true
				idle := hb.timer.Stop()
				if idle {
					hb.a = attemptCopy{}
				}
				hb.mu.Unlock()
				if idle {
					pool.Put(hb)
				}
			}
		})
	})
	b.Run("impl=perHandler", func(b *testing.B) {
		b.ReportAllocs()
		defer cpuPerOp(b)()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				hb := &beat{a: *a, start: time.Now()}
				hb.mu.Lock()
				hb.timer = time.AfterFunc(every, func() {
					hb.mu.Lock()
					_ = hb.done
					hb.mu.Unlock()
				})
				hb.mu.Unlock()

				hb.mu.Lock()
				hb.done = true
				hb.timer.Stop()
				hb.mu.Unlock()
			}
		})
	})
}
