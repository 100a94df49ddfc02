package franzsource_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// TestFullPartitionNotStalledByIdleOne: a partition at
// MaxInFlightPerPartition whose records are settled promptly keeps what
// the client fetched for it and goes on. Pausing it dropped that, and on
// resume the refetch waited a whole FetchMaxWait behind the fetch of an
// idle partition, once per few records: here 120 records of 10 KiB,
// fetched about six at a time (FetchMaxBytes 64 KiB), a cap of 4 and an
// idle second partition with FetchMaxWait 3s took a minute that way (3 s
// per six records); they must take less than 20 s.
func TestFullPartitionNotStalledByIdleOne(t *testing.T) {
	const records = 120
	addr, topic := flowTopic(t, records, 0)
	src := newSource(t, addr, topicName(t, "group"), []string{topic}, kafkagroup.MaxInFlightPerPartition(4),
		kafkagroup.FetchMaxWait(3*time.Second), kafkagroup.FetchMaxBytes(64<<10))
	ctx := testenv.Context(t, 20*time.Second)
	start := time.Now()
	for n := 0; n < records; {
		ms, err := src.Receive(ctx, 10)
		if err != nil {
			t.Fatalf("%d of %d records after %v: %v", n, records, time.Since(start).Round(time.Millisecond), err)
		}
		for _, m := range ms {
			if err := src.Ack(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		n += len(ms)
	}
	t.Logf("%d records in %v", records, time.Since(start).Round(time.Millisecond))
}

// TestFullPartitionPausedPastFetchMaxWait: a partition that stays at
// MaxInFlightPerPartition (its records held, never settled) holds the
// polls back for FetchMaxWait at most; then it is paused and the other
// partition's records keep coming.
func TestFullPartitionPausedPastFetchMaxWait(t *testing.T) {
	const each = 40
	addr, topic := flowTopic(t, each, 0, 1)
	src := newSource(t, addr, topicName(t, "group"), []string{topic}, kafkagroup.MaxInFlightPerPartition(4),
		kafkagroup.FetchMaxWait(500*time.Millisecond), kafkagroup.FetchMaxBytes(64<<10))
	ctx := testenv.Context(t, 20*time.Second)
	for acked := 0; acked < each; {
		ms, err := src.Receive(ctx, 10)
		if err != nil {
			t.Fatalf("%d of partition 1's %d records acked: %v", acked, each, err)
		}
		for _, m := range ms {
			if m.Origin.Partition != 1 {
				continue // held: partition 0 stays full
			}
			if err := src.Ack(ctx, m); err != nil {
				t.Fatal(err)
			}
			acked++
		}
	}
}

// flowTopic is a topic of two partitions on a new cluster, with n records
// of 10 KiB, uncompressed and one to a batch, in each of parts.
func flowTopic(t *testing.T, n int, parts ...int32) (addr, topic string) {
	addr = cluster(t)
	topic = topicName(t, "in")
	createTopic(t, addr, topic, 2)
	cl := client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	value := make([]byte, 10<<10)
	for i := range n {
		for _, p := range parts {
			produce(t, cl, &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "k%d", i), Value: value})
		}
	}
	return addr, topic
}
