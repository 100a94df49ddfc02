package grouptest

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// MemoryBoundedByBytes is both Kafka sources' memory test: 100 records of
// 1 MB, which produce writes to a topic of two partitions (flush ends the
// writing), read by the source newSource makes, under a handler that takes
// one at a time and waits to be released. newSource makes the source
// with the option it is given over the test's own. Fetched and unsettled records
// are bounded by MaxInFlightBytes (8 MiB), so the heap above what the
// broker itself holds stays near that bound, however many records
// MaxInFlightPerPartition (256) would allow.
func MemoryBoundedByBytes(t *testing.T, produce func(key, value []byte), flush func(), newSource func(kafkagroup.Option) consumer.Source) {
	t.Helper()
	const n, size = 100, 1_000_000
	for i := range n {
		produce([]byte{byte(i)}, []byte(strings.Repeat("v", size-1)+string(rune('a'+i%26))))
	}
	flush()
	base := heap()

	entered, release := make(chan struct{}), make(chan struct{})
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		entered <- struct{}{}
		<-release
		return consumer.Result{}, nil
	})
	const bound = 8 << 20
	m := Start(t, newSource(kafkagroup.MaxInFlightBytes(bound)), memstoretest.New(t), h, consumer.Concurrency(1), consumer.MaxInFlight(n))
	var peak uint64
	for range n {
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatal("no handler call within 30s")
		}
		peak = max(peak, heap())
		release <- struct{}{}
	}
	m.Stop(t)
	grown := int64(peak) - int64(base)
	t.Logf("heap above the broker's own: peak %.1f MiB with MaxInFlightBytes %d MiB, 1 MB records on 2 partitions", float64(grown)/(1<<20), bound>>20)
	// The bound, and 32 MiB for what the client holds (a fetch enqueued
	// whole before the bound takes hold, a record being decoded, a fetch's
	// buffers) and the broker's fetch responses, in process here.
	// Unbounded, all 100 MB.
	if limit := int64(bound + 32<<20); grown > limit {
		t.Errorf("heap grew %d MiB, over %d MiB", grown>>20, limit>>20)
	}
}

func heap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
