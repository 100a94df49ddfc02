package kafkacore

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/onceq/onceq/broker"
)

// BenchmarkDispatch is the Dispatcher's own cost per record, with no
// client and no consumer: enqueue, Receive in batches of 512 from six
// partitions, Ack. One op is one record.
func BenchmarkDispatch(b *testing.B) {
	const parts, batch = 6, 512
	d := &Dispatcher[int64, struct{}]{}
	d.Init()
	d.ToMessage = func(m *broker.Message, r int64, attempt int) {
		*m = broker.Message{ID: RecordID("topic", 0, r), Deliveries: attempt}
	}
	tel, err := NewTelemetry(noop.NewMeterProvider(), "bench", "g", []string{"topic"}, "", d)
	if err != nil {
		b.Fatal(err)
	}
	d.Tel, d.Logger = tel, slog.New(slog.DiscardHandler)
	ps := make([]*Partition[int64, struct{}], parts)
	for i := range ps {
		ps[i] = NewPartition[int64, struct{}]("topic", int32(i), 1, -1, tel)
	}
	d.Add(ps...)
	ctx := context.Background()
	b.ReportAllocs()
	var off int64
	for n := 0; n < b.N; {
		k := min(batch, b.N-n)
		at := time.Now() // one per fetch
		for i := range k {
			p := ps[i%parts]
			p.Lock()
			d.EnqueueLocked(p, off, off, 1024, at)
			p.Unlock()
			off++
		}
		for got := 0; got < k; {
			ms, err := d.Receive(ctx, batch)
			if err != nil {
				b.Fatal(err)
			}
			for _, m := range ms {
				if err := d.Ack(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
			got += len(ms)
		}
		n += k
	}
}
