package kafkacontrol_test

import (
	"context"
	"fmt"
	"runtime/pprof"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/proccpu"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// BenchmarkGroupThroughput compares, in one run and over the same topic
// (six partitions, 1 KiB records), a plain kafka-go group Reader loop
// (FetchMessage + CommitMessages, commits batched every second) with the
// onceq consumer over this Source and the in-memory dedup store (claim,
// no-op handler, complete, ack, contiguous commits every second). Each
// reads every record once, under its own group; each timing runs from the
// join to the last record settled. source_msgs/s is the Source alone
// (Receive + Ack, no consumer): the source's own cost over kafka-go. The
// cpu-us/msg figures are the process's CPU time over each timing, per
// record: the in-process broker's share included, alike on each side.
func BenchmarkGroupThroughput(b *testing.B) {
	const partitions, records = 6, 50000
	addr := controlled(b).ListenAddrs()[0]
	topic := topicName(b, "in")
	createTopic(b, addr, topic, partitions)
	w := writer(b, addr, topic)
	body := make([]byte, 1024)
	batch := make([]kgo.Message, 0, 1000)
	ctx := context.Background()
	for i := range records {
		v := append([]byte(nil), body...)
		copy(v, fmt.Sprintf("record %d", i))
		batch = append(batch, kgo.Message{Key: fmt.Appendf(nil, "k%d", i%1000), Value: v})
		if len(batch) == cap(batch) {
			if err := w.WriteMessages(ctx, batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}

	var rawTime, srcTime, onceqTime, rawCPU, srcCPU, onceqCPU time.Duration
	// timed runs one side and adds its wall and CPU time.
	// Each side runs under a profile label (side=raw, source or onceq),
	// which the goroutines it starts inherit: go tool pprof -tagfocus
	// side=onceq shows one side's share of a -cpuprofile.
	timed := func(side string, wall, cpu *time.Duration, run func() time.Duration) {
		pprof.Do(context.Background(), pprof.Labels("side", side), func(context.Context) {
			start := proccpu.Used()
			*wall += run()
			*cpu += proccpu.Used() - start
		})
	}
	b.ResetTimer()
	for i := range b.N {
		timed("raw", &rawTime, &rawCPU, func() time.Duration { return benchRaw(b, addr, topic, fmt.Sprintf("raw-%d", i), records) })
		timed("source", &srcTime, &srcCPU, func() time.Duration { return benchSource(b, addr, topic, fmt.Sprintf("source-%d", i), records) })
		timed("onceq", &onceqTime, &onceqCPU, func() time.Duration { return benchOnceq(b, addr, topic, fmt.Sprintf("onceq-%d", i), records) })
	}
	b.StopTimer()
	rate := func(d time.Duration) float64 { return float64(records*b.N) / d.Seconds() }
	perMsg := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(records*b.N) }
	b.ReportMetric(rate(rawTime), "raw_msgs/s")
	b.ReportMetric(rate(srcTime), "source_msgs/s")
	b.ReportMetric(rate(onceqTime), "onceq_msgs/s")
	b.ReportMetric(rate(onceqTime)/rate(rawTime), "ratio")
	b.ReportMetric(perMsg(rawCPU), "raw_cpu-us/msg")
	b.ReportMetric(perMsg(srcCPU), "source_cpu-us/msg")
	b.ReportMetric(perMsg(onceqCPU), "onceq_cpu-us/msg")
}

// benchSource drives the Source alone (Receive + Ack, no consumer, no
// store): what the source costs over kafka-go.
func benchSource(b *testing.B, addr, topic, group string, records int) time.Duration {
	start := time.Now()
	src, err := kafkasource.New(context.Background(), []string{addr}, group, []string{topic},
		append(fastGroup(), kafkagroup.FetchMaxWait(200*time.Millisecond), kafkagroup.RevokeTimeout(2*time.Second))...)
	if err != nil {
		b.Fatal(err)
	}
	return grouptest.TimeSource(b, start, src, records)
}

func benchRaw(b *testing.B, addr, topic, group string, records int) time.Duration {
	ctx := context.Background()
	start := time.Now()
	r := kgo.NewReader(kgo.ReaderConfig{
		Brokers: []string{addr}, GroupID: group, Topic: topic,
		StartOffset: kgo.FirstOffset, CommitInterval: time.Second,
		HeartbeatInterval: 100 * time.Millisecond, MaxWait: 200 * time.Millisecond,
	})
	for range records {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	took := time.Since(start)
	if err := r.Close(); err != nil {
		b.Fatal(err)
	}
	return took
}

func benchOnceq(b *testing.B, addr, topic, group string, records int) time.Duration {
	start := time.Now()
	src, err := kafkasource.New(context.Background(), []string{addr}, group, []string{topic},
		append(fastGroup(), kafkagroup.FetchMaxWait(200*time.Millisecond), kafkagroup.RevokeTimeout(2*time.Second))...)
	if err != nil {
		b.Fatal(err)
	}
	return grouptest.TimeConsumer(b, start, src, records)
}
