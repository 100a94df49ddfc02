package consumer_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/proccpu"
	"github.com/onceq/onceq/sources/memsource"
)

// BenchmarkMemoryPipeline measures the whole path, memory source → claim →
// handler → complete → ack, per message (one op = one message). The
// messages are produced before the timer starts, so allocs/op, ns/op and
// cpu-us/msg (the process's CPU time over the timed part, per message)
// count the consumer, the memory source's receive and settles and the
// store, not the producing. Producing happens in produce, so a CPU profile
// can leave it out (pprof -ignore produce).
func BenchmarkMemoryPipeline(b *testing.B) {
	for _, workers := range []int{1, 16} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			q := memsourcetest.NewQueue(b, "bench")
			produce(b, q, b.N)
			resp := []byte("ok")
			h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
				return consumer.Result{Response: resp}, nil
			})
			c, err := consumer.New(q.Source(), memstoretest.New(b), h, consumer.Concurrency(workers), consumer.MaxInFlight(max(64, 4*workers)), consumer.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				b.Fatal(err)
			}
			runCtx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := proccpu.Used()
			start := time.Now()
			go func() { done <- c.Run(runCtx) }()
			for q.Stats().Acked < b.N {
				time.Sleep(200 * time.Microsecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			cpuPerMsg := proccpu.PerOp(cpu, b.N)
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
			b.ReportMetric(cpuPerMsg, "cpu-us/msg")
		})
	}
}

// produce sends n distinct 256-byte messages to q.
func produce(b *testing.B, q *memsource.Queue, n int) {
	b.Helper()
	body := make([]byte, 256)
	for i := range n {
		copy(body, strconv.Itoa(i))
		if err := q.Send(context.Background(), memsource.Outgoing{Body: append([]byte(nil), body...)}); err != nil {
			b.Fatal(err)
		}
	}
}

// countingStore counts the calls that reach the store behind the cache.
type countingStore struct {
	dedup.Store
	calls atomic.Int64
}

func (s *countingStore) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	s.calls.Add(1)
	return s.Store.Claim(ctx, req)
}

func (s *countingStore) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	s.calls.Add(1)
	return s.Store.Complete(ctx, req)
}

func (s *countingStore) Fail(ctx context.Context, req dedup.FailRequest) error {
	s.calls.Add(1)
	return s.Store.Fail(ctx, req)
}

func (s *countingStore) Extend(ctx context.Context, req dedup.ExtendRequest) error {
	s.calls.Add(1)
	return s.Store.Extend(ctx, req)
}

func (s *countingStore) Get(ctx context.Context, key string) (dedup.Record, error) {
	s.calls.Add(1)
	return s.Store.Get(ctx, key)
}

// BenchmarkCachedDuplicates is the duplicate answered by the COMPLETED
// cache: Guard.Process of messages already processed, from every core
// (one op = one message). store-calls/msg counts the calls that got past
// the cache to the store.
func BenchmarkCachedDuplicates(b *testing.B) {
	const distinct = 1024
	store := &countingStore{Store: memstoretest.New(b)}
	resp := []byte("ok")
	g, err := consumer.NewGuard(store, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: resp}, nil
	}))
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([]consumer.Message, distinct)
	ctx := context.Background()
	for i := range msgs {
		body := make([]byte, 256)
		copy(body, strconv.Itoa(i))
		msgs[i] = consumer.Message{ID: strconv.Itoa(i), Body: body, Deliveries: 1,
			Origin: consumer.Origin{System: "memory", Destination: "bench"}}
		if o := g.Process(ctx, &msgs[i]); o.Kind != consumer.Processed {
			b.Fatalf("warming: %v", o.Kind)
		}
	}
	before := store.calls.Load()
	var wrong atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu := proccpu.Used()
	start := time.Now()
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine works on its own copies: Process writes the key
		// into the message.
		own := make([]consumer.Message, distinct)
		copy(own, msgs)
		i := int(next.Add(1)) * 97
		for pb.Next() {
			if o := g.Process(ctx, &own[i%distinct]); o.Kind != consumer.Duplicate {
				wrong.Add(1)
			}
			i++
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	cpuPerMsg := proccpu.PerOp(cpu, b.N)
	if n := wrong.Load(); n > 0 {
		b.Fatalf("%d of %d messages were not duplicates", n, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(cpuPerMsg, "cpu-us/msg")
	b.ReportMetric(float64(store.calls.Load()-before)/float64(b.N), "store-calls/msg")
}
