package franzsource_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/proccpu"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/franzsource"
)

// BenchmarkOutboxRelayFranz measures a Relay with the franz-go Sender
// draining committed entries (1 KiB each, an order ID apiece as the
// OrderingKey) against a raw produce loop of the same records (Produce
// each, then Flush), on one idempotent client each, in the same run. The
// relay's batch is 1000 entries; each Send waits for its records'
// acknowledgements before the relay marks them.
func BenchmarkOutboxRelayFranz(b *testing.B) {
	const partitions, records, batch = 6, 20000, 1000
	addr := cluster(b)
	body := make([]byte, 1024)
	var rawTime, relayTime, rawCPU, relayCPU time.Duration
	for n := range b.N {
		topic := topicName(b, fmt.Sprintf("raw-%d", n))
		createTopic(b, addr, topic, partitions)
		cl := client(b, addr)
		cpu, start := proccpu.Used(), time.Now()
		var wg sync.WaitGroup
		wg.Add(records)
		for i := range records {
			r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "o-%d", i), Value: body,
				Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: fmt.Appendf(nil, "raw-%d#out0", i)}}}
			cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
				if err != nil {
					b.Error(err)
				}
				wg.Done()
			})
		}
		wg.Wait()
		rawTime += time.Since(start)
		rawCPU += proccpu.Used() - cpu

		topic = topicName(b, fmt.Sprintf("relay-%d", n))
		createTopic(b, addr, topic, partitions)
		store := memstore.New()
		for i := range records {
			now := time.Now()
			if _, err := store.ClaimComplete(context.Background(), dedup.ClaimCompleteRequest{Key: fmt.Sprintf("onceq#%d", i), Owner: "w",
				Now: now, ExpiresAt: now.Add(time.Hour), Outbox: []outbox.Message{{Destination: topic, OrderingKey: fmt.Sprintf("o-%d", i), Body: body}}}); err != nil {
				b.Fatal(err)
			}
		}
		sender, err := franzsource.NewSender(client(b, addr))
		if err != nil {
			b.Fatal(err)
		}
		relay, err := outbox.NewRelay(store.Outbox(), sender, outbox.BatchSize(batch), outbox.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			b.Fatal(err)
		}
		cpu, start = proccpu.Used(), time.Now()
		sent := 0
		for {
			leased, err := relay.Pass(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			if leased == 0 {
				break
			}
			sent += leased
		}
		relayTime += time.Since(start)
		relayCPU += proccpu.Used() - cpu
		if sent != records {
			b.Fatalf("the relay leased %d entries, want %d", sent, records)
		}
	}
	rate := func(d time.Duration) float64 { return float64(records*b.N) / d.Seconds() }
	perMsg := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(records*b.N) }
	b.ReportMetric(rate(rawTime), "raw_msgs/s")
	b.ReportMetric(rate(relayTime), "relay_msgs/s")
	b.ReportMetric(rate(relayTime)/rate(rawTime), "ratio")
	b.ReportMetric(perMsg(rawCPU), "raw_cpu-us/msg")
	b.ReportMetric(perMsg(relayCPU), "relay_cpu-us/msg")
}
