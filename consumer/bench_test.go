package consumer_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/sources/memsource"
)

// BenchmarkMemoryPipeline measures the whole path, memory source → claim →
// handler → complete → ack, per message (one op = one message).
func BenchmarkMemoryPipeline(b *testing.B) {
	for _, workers := range []int{1, 16} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			q := memsource.NewQueue("bench")
			ctx := context.Background()
			body := make([]byte, 256)
			for i := range b.N {
				copy(body, strconv.Itoa(i))
				_ = q.Send(ctx, memsource.Outgoing{Body: append([]byte(nil), body...)})
			}
			resp := []byte("ok")
			h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
				return consumer.Result{Response: resp}, nil
			})
			c, err := consumer.New(q.Source(), memstore.New(), h, consumer.Concurrency(workers), consumer.MaxInFlight(max(64, 4*workers)))
			if err != nil {
				b.Fatal(err)
			}
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			go func() { done <- c.Run(runCtx) }()
			for q.Stats().Acked < b.N {
				time.Sleep(200 * time.Microsecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}
