package franzsource_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/proccpu"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// BenchmarkFranzThroughput compares, in one run and over the same topic
// (six partitions, 1 KiB records), a plain franz-go group loop
// (PollFetches, then a synchronous CommitUncommittedOffsets per poll) with
// the onceq consumer over this Source and the in-memory dedup store
// (claim, no-op handler, complete, ack, contiguous commits every second).
// Each reads every record once, under its own group; each timing runs from
// the client's creation to the last record settled. source_msgs/s is the
// Source alone (Receive + Ack, no consumer): the source's own cost over
// franz-go. The cpu-us/msg figures are the process's CPU time over each
// timing, per record: the in-process broker's share included, alike on
// each side.
func BenchmarkFranzThroughput(b *testing.B) {
	const partitions, records = 6, 50000
	addr := cluster(b)
	topic := topicName(b, "in")
	createTopic(b, addr, topic, partitions)
	body := make([]byte, 1024)
	recs := make([]*kgo.Record, 0, records)
	for i := range records {
		v := append([]byte(nil), body...)
		copy(v, fmt.Sprintf("record %d", i))
		recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%1000), Value: v})
	}
	produce(b, client(b, addr), recs...)

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

func benchRaw(b *testing.B, addr, topic, group string, records int) time.Duration {
	ctx := context.Background()
	start := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	for n := 0; n < records; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		n += fs.NumRecords()
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
	}
	took := time.Since(start)
	cl.Close()
	return took
}

// benchSource drives the Source alone (Receive + Ack, no consumer, no
// store): what the source costs over franz-go.
func benchSource(b *testing.B, addr, topic, group string, records int) time.Duration {
	start := time.Now()
	return grouptest.TimeSource(b, start, benchNew(b, addr, topic, group), records)
}

func benchNew(b *testing.B, addr, topic, group string) *franzsource.Source {
	src, err := franzsource.New(context.Background(), []string{addr}, group, []string{topic},
		append(fastGroup(), kafkagroup.FetchMaxWait(200*time.Millisecond), kafkagroup.RevokeTimeout(2*time.Second),
			kafkagroup.WithLogger(slog.New(slog.DiscardHandler)))...)
	if err != nil {
		b.Fatal(err)
	}
	return src
}

func benchOnceq(b *testing.B, addr, topic, group string, records int) time.Duration {
	start := time.Now()
	return grouptest.TimeConsumer(b, start, benchNew(b, addr, topic, group), records)
}
