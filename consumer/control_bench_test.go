package consumer_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testsupport/proccpu"
)

// controlWork is the per-message work of BenchmarkPipelineControl: a
// fixed number of rounds of integer arithmetic, a few microseconds on one
// core, about what BenchmarkMemoryPipeline spends per message.
const controlWork = 2500

// spin does n rounds of arithmetic that the compiler cannot drop.
func spin(seed uint64, n int) uint64 {
	x := seed | 1
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// BenchmarkPipelineControl is the machine's own ceiling for the shape of
// BenchmarkMemoryPipeline/workers=16, with none of onceq in it: run it
// with -cpu 1,2 beside that benchmark to see how far the cores and Go's
// scheduler let this shape of work scale (one op = one message).
//
//   - handoff: one goroutine hands each message over a channel to 16
//     workers, each does controlWork and hands it on over a second
//     channel to one goroutine that settles it, as the consumer's receive
//     loop, handlers and settling do;
//
//   - parallel: GOMAXPROCS goroutines each do controlWork per message with
//     no hand-off at all: the most the cores give.
//
// Both report msgs/s and cpu-us/msg (the process's CPU time per message).
//
//	go test -run '^$' -bench '^BenchmarkPipelineControl$' -cpu 1,2 ./consumer/
func BenchmarkPipelineControl(b *testing.B) {
	b.Run("handoff", func(b *testing.B) {
		in := make(chan uint64, 64)
		out := make(chan uint64, 64)
		var workers sync.WaitGroup
		measure(b, func() {
			for range 16 {
				workers.Go(func() {
					for m := range in {
						out <- spin(m, controlWork)
					}
				})
			}
			settled := make(chan uint64)
			go func() {
				var sum uint64
				for range b.N {
					sum += <-out
				}
				settled <- sum
			}()
			for i := range b.N {
				in <- uint64(i)
			}
			close(in)
			if <-settled == 0 {
				b.Fatal("the work summed to zero: it was not done")
			}
			workers.Wait()
		})
	})
	b.Run("parallel", func(b *testing.B) {
		var sum atomic.Uint64
		measure(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				var x uint64
				for pb.Next() {
					x += spin(x, controlWork)
				}
				sum.Add(x)
			})
		})
		if b.N > 0 && sum.Load() == 0 {
			b.Fatal("the work summed to zero: it was not done")
		}
	})
}

// measure runs f (b.N messages) and reports msgs/s and cpu-us/msg.
func measure(b *testing.B, f func()) {
	b.ResetTimer()
	cpu := proccpu.Used()
	start := time.Now()
	f()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(proccpu.PerOp(cpu, b.N), "cpu-us/msg")
}
