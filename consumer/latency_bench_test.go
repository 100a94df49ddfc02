package consumer_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/memsource"
)

// BenchmarkLatencyHiding runs a handler that sleeps 10 ms (a slow
// downstream call) with 1 worker and with 64, over the same number of
// rounds of work each, and reports the throughput ratio: how much of the
// handler's latency the pool hides. One op is one pair of runs.
func BenchmarkLatencyHiding(b *testing.B) {
	const rounds, sleep = 40, 10 * time.Millisecond
	var rate1, rate64 float64
	for range b.N {
		rate1 += sleepyRun(b, 1, rounds, sleep)
		rate64 += sleepyRun(b, 64, rounds, sleep)
	}
	b.ReportMetric(rate1/float64(b.N), "w1_msgs/s")
	b.ReportMetric(rate64/float64(b.N), "w64_msgs/s")
	b.ReportMetric(rate64/rate1, "ratio")
}

// sleepyRun drains workers×rounds messages through a consumer of that many
// workers and returns its rate in messages/s.
func sleepyRun(b *testing.B, workers, rounds int, sleep time.Duration) float64 {
	b.Helper()
	ctx := context.Background()
	q := memsourcetest.NewQueue(b, "sleepy")
	n := workers * rounds
	for i := range n {
		_ = q.Send(ctx, memsource.Outgoing{Body: []byte("m" + strconv.Itoa(i))})
	}
	h := consumer.HandlerFunc(func(ctx context.Context, _ *consumer.Message) (consumer.Result, error) {
		t := time.NewTimer(sleep)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return consumer.Result{}, ctx.Err()
		}
		return consumer.Result{Response: []byte("ok")}, nil
	})
	c, err := consumer.New(q.Source(), memstoretest.New(b), h, consumer.Concurrency(workers), consumer.MaxInFlight(2*workers))
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.Run(runCtx) }()
	for q.Stats().Acked < n {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return float64(n) / elapsed.Seconds()
}
