package telemetry_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/memsource"
)

func TestTracesAndMetrics(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	// A producer's span, carried in the message attributes.
	pctx, producer := tp.Tracer("producer").Start(context.Background(), "send orders")
	attrs := map[string]string{"idempotency-key": "o-1"}
	consumer.InjectTraceContext(pctx, attrs)
	producer.End()
	if attrs["traceparent"] == "" {
		t.Fatalf("no traceparent injected: %v", attrs)
	}

	q := memsourcetest.NewQueue(t, "orders")
	ctx := context.Background()
	_ = q.Send(ctx, memsource.Outgoing{Body: []byte("a"), Attributes: attrs})
	_ = q.Send(ctx, memsource.Outgoing{Body: []byte("a"), Attributes: map[string]string{"idempotency-key": "o-1"}})
	_ = q.Send(ctx, memsource.Outgoing{Body: []byte("bad"), Attributes: map[string]string{"idempotency-key": ""}})
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("ok")}, nil
	})
	c, err := consumer.New(q.Source(), memstoretest.New(t), h, consumer.Concurrency(1),
		consumer.WithTracerProvider(tp), consumer.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { s := q.Stats(); return s.Acked+s.DeadLettered == 3 })

	var process sdktrace.ReadOnlySpan
	children := map[string]trace.SpanID{}
	for _, s := range rec.Ended() {
		if s.Name() == "process orders" && s.Parent().TraceID() == producer.SpanContext().TraceID() {
			process = s
		}
	}
	if process == nil {
		t.Fatal("no process span continued the producer's trace")
	}
	if process.SpanKind() != trace.SpanKindConsumer || process.Parent().SpanID() != producer.SpanContext().SpanID() {
		t.Fatalf("process span kind %v parent %v", process.SpanKind(), process.Parent().SpanID())
	}
	want := map[attribute.Key]string{"messaging.system": "memory", "messaging.destination.name": "orders",
		"onceq.outcome": "processed", "onceq.dedup.status": "COMPLETED", "messaging.operation.type": "process"}
	got := map[attribute.Key]string{}
	for _, kv := range process.Attributes() {
		got[kv.Key] = kv.Value.String()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, got[k], v)
		}
	}
	if got["messaging.message.id"] == "" {
		t.Error("no messaging.message.id")
	}
	for _, s := range rec.Ended() {
		if s.Parent().SpanID() == process.SpanContext().SpanID() {
			children[s.Name()] = s.SpanContext().SpanID()
		}
	}
	for _, name := range []string{"onceq.claim", "onceq.handler", "onceq.complete"} {
		if _, ok := children[name]; !ok {
			t.Errorf("no %s span under the process span (children: %v)", name, children)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	outcomes := counterBy(rm, "onceq.messages", "onceq.outcome")
	if outcomes["processed"] != 1 || outcomes["duplicate"] != 1 || outcomes["dead_lettered"] != 1 {
		t.Fatalf("onceq.messages by outcome %v", outcomes)
	}
	if settles := counterBy(rm, "onceq.source.settles", "onceq.action"); settles["ack"] != 2 || settles["dead_letter"] != 1 {
		t.Fatalf("onceq.source.settles by action %v", settles)
	}
	// The duplicate is answered by the COMPLETED cache: no store call.
	if calls := counterBy(rm, "onceq.store.calls", "onceq.store.operation"); calls["claim"] != 1 || calls["complete"] != 1 {
		t.Fatalf("onceq.store.calls by operation %v", calls)
	}
	if hits := counterBy(rm, "onceq.cache.hits", ""); hits[""] != 1 {
		t.Fatalf("onceq.cache.hits %v", hits)
	}
}

// counterBy sums an Int64 counter by one attribute.
func counterBy(rm metricdata.ResourceMetrics, name string, key attribute.Key) map[string]int64 {
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					v, _ := dp.Attributes.Value(key)
					out[v.String()] += dp.Value
				}
			}
		}
	}
	return out
}

// Without a tracer provider the consumer starts no spans, yet the handler
// still sees the producer's trace context; once the application sets a
// global provider, spans are recorded through it. (It sets the global
// provider, so it is the last test touching tracing.)
func TestSpansFollowTheGlobalProvider(t *testing.T) {
	producerTP := sdktrace.NewTracerProvider()
	pctx, producer := producerTP.Tracer("producer").Start(context.Background(), "send")
	attrs := map[string]string{}
	consumer.InjectTraceContext(pctx, attrs)
	producer.End()

	var seen []trace.SpanContext
	h := consumer.HandlerFunc(func(ctx context.Context, _ *consumer.Message) (consumer.Result, error) {
		seen = append(seen, trace.SpanContextFromContext(ctx))
		return consumer.Result{}, nil
	})
	newConsumer := func(q *memsource.Queue) *consumer.Consumer {
		c, err := consumer.New(q.Source(), memstoretest.New(t), h, consumer.Concurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx := context.Background()
	q1, q2 := memsourcetest.NewQueue(t, "before"), memsourcetest.NewQueue(t, "after")
	c1, c2 := newConsumer(q1), newConsumer(q2) // both built before a provider is set
	_ = q1.Send(ctx, memsource.Outgoing{Body: []byte("a"), Attributes: attrs})
	runUntil(t, c1, func() bool { return q1.Stats().Acked == 1 })
	if len(seen) != 1 || seen[0].TraceID() != producer.SpanContext().TraceID() {
		t.Fatalf("handler saw %v, want the producer's trace %v", seen, producer.SpanContext().TraceID())
	}

	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	_ = q2.Send(ctx, memsource.Outgoing{Body: []byte("b"), Attributes: attrs})
	runUntil(t, c2, func() bool { return q2.Stats().Acked == 1 })
	var process, handler sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "process after":
			process = s
		case "onceq.handler":
			handler = s
		}
	}
	if process == nil || process.Parent().SpanID() != producer.SpanContext().SpanID() {
		t.Fatalf("no process span under the producer's after the global provider was set (%d spans)", len(rec.Ended()))
	}
	if handler == nil || handler.Parent().SpanID() != process.SpanContext().SpanID() ||
		len(seen) != 2 || seen[1].SpanID() != handler.SpanContext().SpanID() {
		t.Fatalf("handler's span context %v, want its onceq.handler span under the process span", seen[1:])
	}
}

// runUntil runs c until done reports true, then cancels and waits.
func runUntil(t *testing.T, c *consumer.Consumer, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			cancel()
			<-errc
			t.Fatal("condition not reached within 60s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
