package franzsource_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/proccpu"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/franzsource"
)

// countingSender counts the entries its Sender took.
type countingSender struct {
	outbox.Sender
	sent atomic.Int64
}

func (s *countingSender) Send(ctx context.Context, entries []outbox.Entry) []error {
	errs := s.Sender.Send(ctx, entries)
	for _, err := range errs {
		if err == nil {
			s.sent.Add(1)
		}
	}
	return errs
}

// BenchmarkOutboxRelayFranz measures a Relay with the franz-go Sender
// draining committed entries (1 KiB each, an order ID apiece as the
// OrderingKey) against a raw produce loop of the same records (Produce
// each, then Flush), on one idempotent client each, in the same run. The
// relay runs four passes of 1000 entries at once; each Send waits for its
// records' acknowledgements before its pass marks them.
func BenchmarkOutboxRelayFranz(b *testing.B) {
	const partitions, records, batch, passes = 6, 20000, 1000, 4
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
		store := memstoretest.New(b)
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
		counted := &countingSender{Sender: sender}
		relay, err := outbox.NewRelay(store.Outbox(), counted, outbox.BatchSize(batch), outbox.Concurrency(passes),
			outbox.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			b.Fatal(err)
		}
		cpu, start = proccpu.Used(), time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- relay.Run(ctx) }()
		for counted.sent.Load() < records {
			time.Sleep(time.Millisecond) // a benchmark's wait for its count, not a test's proof
		}
		relayTime += time.Since(start)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		relayCPU += proccpu.Used() - cpu
		if sent, _ := store.Outbox().Entries(context.Background(), outbox.Dispatched, 0); len(sent) != records {
			b.Fatalf("the relay dispatched %d entries, want %d", len(sent), records)
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
