package franzsource_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/grouptest"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// TestMemoryBoundedByBytes: 100 records of 1 MB on two partitions, under a
// handler that takes one at a time and waits to be released. Fetched and
// unsettled records are bounded by MaxInFlightBytes (8 MiB): every
// partition pauses above it, so the heap above what the broker itself
// holds stays near that bound, however many records
// MaxInFlightPerPartition (256) would allow.
func TestMemoryBoundedByBytes(t *testing.T) {
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 2)
	const n, size = 100, 1_000_000
	p := client(t, addr, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(1_048_588), kgo.ProducerBatchCompression(kgo.NoCompression()))
	for i := range n {
		produce(t, p, &kgo.Record{Key: []byte{byte(i)}, Value: []byte(strings.Repeat("v", size-1) + string(rune('a'+i%26)))})
	}
	p.Close()
	base := heap()

	entered, release := make(chan struct{}), make(chan struct{})
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		entered <- struct{}{}
		<-release
		return consumer.Result{}, nil
	})
	const bound = 8 << 20
	src := newSource(t, addr, group, []string{topic}, kafkagroup.MaxInFlightBytes(bound))
	m := grouptest.Start(t, src, memstore.New(), h, consumer.Concurrency(1), consumer.MaxInFlight(n))
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
	// The bound, and 32 MiB for the fetch enqueued whole before the pause
	// takes hold and the broker's fetch responses, in process here.
	// Unbounded, all 100 MB. Records are sent uncompressed: a compressed
	// batch is decompressed whole, so one fetch can exceed its bytes.
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
