package consumer

import (
	"context"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/onceq/onceq/internal/testsupport/proccpu"
)

// These benchmarks set each of the consumer's less plain constructions
// beside the plain one it replaced, in the same run, so that the figure in
// its comment can be measured again:
//
//	go test -run '^$' -bench 'SettleDeadlines|LeaseRenewal' \
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

// BenchmarkLeaseRenewal: the lease renewal timer of one leased handler,
// started and stopped around a handler that returns before the first
// renewal: the renewal and its timer reused through a sync.Pool, as the
// Guard does, or made for each handler (time.AfterFunc). The same fields
// are set either way.
func BenchmarkLeaseRenewal(b *testing.B) {
	// What a renewal holds of its attempt: a copy of attempt's size
	// (232 bytes), pointers included.
	type attemptCopy [29]unsafe.Pointer
	type leaseTimer struct {
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
				rn, _ := pool.Get().(*leaseTimer)
				if rn == nil {
					rn = &leaseTimer{}
					rn.timer = time.AfterFunc(time.Hour, func() {})
					rn.timer.Stop()
				}
				rn.mu.Lock()
				rn.a, rn.start, rn.done = *a, time.Now(), false
				rn.timer.Reset(every)
				rn.mu.Unlock()

				rn.mu.Lock()
				rn.done = true
				idle := rn.timer.Stop()
				if idle {
					rn.a = attemptCopy{}
				}
				rn.mu.Unlock()
				if idle {
					pool.Put(rn)
				}
			}
		})
	})
	b.Run("impl=perHandler", func(b *testing.B) {
		b.ReportAllocs()
		defer cpuPerOp(b)()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rn := &leaseTimer{a: *a, start: time.Now()}
				rn.mu.Lock()
				rn.timer = time.AfterFunc(every, func() {
					rn.mu.Lock()
					_ = rn.done
					rn.mu.Unlock()
				})
				rn.mu.Unlock()

				rn.mu.Lock()
				rn.done = true
				rn.timer.Stop()
				rn.mu.Unlock()
			}
		})
	})
}
