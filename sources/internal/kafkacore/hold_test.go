package kafkacore

import (
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// TestCommitHeldTooLongStops: on an explicit clock, a record left
// unfinished holds its partition's commit; its age is reported, and once
// it passes the bound Receive fails with a *CommitHeldError that stops the
// consumer (retry.Misconfigured) instead of letting a replay run the
// records completed after it again. Settling it lifts the stop.
func TestCommitHeldTooLongStops(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var d Dispatcher[string, struct{}]
	d.Init()
	d.Now = func() time.Time { return now }
	d.ToMessage = func(m *broker.Message, r string, attempt int) { *m = broker.Message{ID: r, Deliveries: attempt} }
	tel, err := NewTelemetry(noop.NewMeterProvider(), "test", "g", []string{"t"}, "", &d)
	if err != nil {
		t.Fatal(err)
	}
	d.Tel = tel
	p := NewPartition[string, struct{}]("t", 0, 1, -1, tel)
	enqueue := func(off int64, r string) {
		p.Lock()
		defer p.Unlock()
		if !d.EnqueueLocked(p, off, r, len(r), now) {
			t.Fatalf("enqueue %d refused", off)
		}
	}
	receive := func(want int) []*broker.Message {
		t.Helper()
		ms, err := d.Receive(t.Context(), 10)
		if err != nil || len(ms) != want {
			t.Fatalf("Receive: %d messages, %v; want %d", len(ms), err, want)
		}
		return ms
	}
	d.Add(p)
	d.LimitHold(time.Hour)
	enqueue(0, "held")
	enqueue(1, "done")
	ms := receive(2)
	if err := d.Ack(t.Context(), ms[1]); err != nil {
		t.Fatal(err)
	}
	now = now.Add(59 * time.Minute)
	var ages []time.Duration
	d.HoldAges(func(age time.Duration, _ metric.ObserveOption) { ages = append(ages, age) })
	if len(ages) != 1 || ages[0] != 59*time.Minute {
		t.Fatalf("hold ages %v, want [59m]", ages)
	}
	enqueue(2, "later")
	later := receive(1)
	now = now.Add(2 * time.Minute)
	_, err = d.Receive(t.Context(), 10)
	var held *kafkagroup.CommitHeldError
	if !errors.As(err, &held) || held.Offset != 0 || held.Held != 61*time.Minute || retry.Classify(err) != retry.Misconfigured {
		t.Fatalf("Receive past the bound: %v, want a *CommitHeldError for offset 0 held 61m that stops the consumer", err)
	}
	if err := d.Ack(t.Context(), ms[0]); err != nil {
		t.Fatal(err)
	}
	if err := d.Ack(t.Context(), later[0]); err != nil {
		t.Fatal(err)
	}
	enqueue(3, "next")
	receive(1) // nothing held long now: the stop is lifted
}
