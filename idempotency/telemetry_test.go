package idempotency_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/onceq/onceq/idempotency"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/metrictest"
)

// spans records the names of the spans ended.
type spans struct {
	embedded.TracerProvider
	mu    sync.Mutex
	ended []string
}

func (s *spans) Tracer(string, ...trace.TracerOption) trace.Tracer { return tracer{s: s} }

type tracer struct {
	embedded.Tracer
	s *spans
}

func (t tracer) Start(ctx context.Context, name string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	sp := &span{Span: noop.Span{}, name: name, s: t.s}
	return trace.ContextWithSpan(ctx, sp), sp
}

type span struct {
	trace.Span
	name string
	s    *spans
}

func (sp *span) IsRecording() bool { return true }

func (sp *span) End(...trace.SpanEndOption) {
	sp.s.mu.Lock()
	sp.s.ended = append(sp.s.ended, sp.name)
	sp.s.mu.Unlock()
}

// A call has the consumer's spans (its processing, its store calls, the
// function's run) and metrics (counted by outcome, under messaging
// system "idempotency" and the namespace).
func TestSpansAndMetricsAreTheConsumers(t *testing.T) {
	reader, mp := metrictest.Provider(t)
	tp := &spans{}
	r := newRunner(t, memstoretest.New(t), idempotency.WithTracerProvider(tp), idempotency.WithMeterProvider(mp), idempotency.Namespace("payments"))
	fn := func(context.Context, *idempotency.Tx) ([]byte, error) { return []byte("ok"), nil }
	for range 2 {
		if _, err := r.Do(context.Background(), "k", nil, fn); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"process payments", "onceq.handler", "onceq.claim", "onceq.complete"} {
		if !slices.Contains(tp.ended, name) {
			t.Errorf("no %q span among %q", name, tp.ended)
		}
	}
	sys := attribute.String("messaging.system", "idempotency")
	for outcome, want := range map[string]int64{"processed": 1, "duplicate": 1} {
		if n := metrictest.Counter(t, reader, "onceq.messages", attribute.String("onceq.outcome", outcome), sys); n != want {
			t.Errorf("onceq.messages{outcome=%s}: %d, want %d", outcome, n, want)
		}
	}
}
