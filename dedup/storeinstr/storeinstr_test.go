package storeinstr_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/internal/hookset"
	"github.com/onceq/onceq/internal/testsupport/metrictest"
	"github.com/onceq/onceq/retry"
)

// codeErr is a database error with a code and a class.
type codeErr struct {
	code  string
	class retry.Class
}

func (e codeErr) Error() string           { return e.code }
func (e codeErr) RetryClass() retry.Class { return e.class }

func code(err error) string {
	var ce codeErr
	if errors.As(err, &ce) {
		return ce.code
	}
	return ""
}

var quick = retry.Policy{Initial: time.Millisecond, Max: time.Millisecond, MaxAttempts: 5}

type hooks struct {
	mu      sync.Mutex
	calls   []string
	retries []string
}

func (h *hooks) OnStoreCall(_ context.Context, op string, _ time.Duration, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, op+"/"+code(err))
}

func (h *hooks) OnStoreRetry(_ context.Context, op string, c retry.Class, errorCode string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.retries = append(h.retries, op+"/"+c.String()+"/"+errorCode)
}

// Retryable faults are retried to success and each one counted, timed,
// told to the hooks; a decision is counted once and never retried; a
// throttle is marked as one.
func TestDoCountsRetriesAndErrors(t *testing.T) {
	reader, mp := metrictest.Provider(t)
	var h hooks
	in, err := storeinstr.New(storeinstr.SystemPostgreSQL, "pgstore", code, storeinstr.Config{Policy: quick, Hooks: []storeinstr.Hook{&h}, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	faults := []error{codeErr{"40001", retry.Transient}, errors.New("reset"), codeErr{"OOM", retry.Throttled}}
	attempts := 0
	err = in.Do(ctx, storeinstr.OpClaim, func(_ context.Context, attempt int) error {
		attempts++
		if attempt != attempts {
			t.Errorf("attempt %d, want %d", attempt, attempts)
		}
		if attempt <= len(faults) {
			return faults[attempt-1]
		}
		return nil
	})
	if err != nil || attempts != 4 {
		t.Fatalf("Do: %v after %d attempts, want success after 4", err, attempts)
	}
	decision := codeErr{"ConditionalCheckFailedException", retry.ConditionFailed}
	attempts = 0
	if err := in.Do(ctx, storeinstr.OpComplete, func(context.Context, int) error { attempts++; return decision }); !errors.Is(err, decision) || attempts != 1 {
		t.Fatalf("a decision: %v after %d attempts, want it once", err, attempts)
	}

	system := storeinstr.AttrSystem.String(storeinstr.SystemPostgreSQL)
	claim := storeinstr.AttrOperation.String(storeinstr.OpClaim)
	status := func(c string) attribute.KeyValue { return storeinstr.AttrStatusCode.String(c) }
	for _, c := range []struct {
		name string
		want int64
		kv   []attribute.KeyValue
	}{
		{storeinstr.MetricRetries, 2, []attribute.KeyValue{system, claim, storeinstr.AttrRetryClass.String("transient"), storeinstr.AttrThrottle.Bool(false)}},
		{storeinstr.MetricRetries, 1, []attribute.KeyValue{system, claim, status("OOM"), storeinstr.AttrRetryClass.String("throttled"), storeinstr.AttrThrottle.Bool(true)}},
		{storeinstr.MetricRetries, 1, []attribute.KeyValue{status(storeinstr.CodeUnknown)}},
		{storeinstr.MetricErrors, 3, []attribute.KeyValue{system, claim}},
		{storeinstr.MetricErrors, 1, []attribute.KeyValue{claim, status("OOM"), storeinstr.AttrThrottle.Bool(true)}},
		{storeinstr.MetricErrors, 1, []attribute.KeyValue{storeinstr.AttrOperation.String(storeinstr.OpComplete), status("ConditionalCheckFailedException"), storeinstr.AttrThrottle.Bool(false)}},
		{storeinstr.MetricRetries, 0, []attribute.KeyValue{storeinstr.AttrOperation.String(storeinstr.OpComplete)}},
	} {
		if n := metrictest.Counter(t, reader, c.name, c.kv...); n != c.want {
			t.Errorf("%s %v: %d, want %d", c.name, c.kv, n, c.want)
		}
	}
	if n, _ := metrictest.Histogram(t, reader, storeinstr.MetricDuration); n != 5 {
		t.Errorf("%s: %d requests, want 5", storeinstr.MetricDuration, n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.calls) != 5 || h.calls[0] != "claim/40001" || h.calls[3] != "claim/" || h.calls[4] != "complete/ConditionalCheckFailedException" {
		t.Errorf("call hooks told %v", h.calls)
	}
	if len(h.retries) != 3 || h.retries[1] != "claim/transient/" || h.retries[2] != "claim/throttled/OOM" {
		t.Errorf("retry hooks told %v", h.retries)
	}
}

// A hook that implements neither the shared interfaces nor one the
// store sorts for itself (Own) is refused; one the store takes is kept.
func TestNewRefusesUnusedHook(t *testing.T) {
	for name, h := range map[string]storeinstr.Hook{"none": struct{}{}, "nil": nil} {
		if _, err := storeinstr.New(storeinstr.SystemRedis, "redisstore", code, storeinstr.Config{Hooks: []storeinstr.Hook{h}}); !errors.Is(err, configerr.ErrInvalidConfig) {
			t.Errorf("%s: New: %v, want ErrInvalidConfig", name, err)
		}
	}
	var own []fmt.Stringer
	cfg := storeinstr.Config{Hooks: []storeinstr.Hook{&hooks{}, time.Second}, Own: []func(any) bool{hookset.Into(&own)}}
	if _, err := storeinstr.New(storeinstr.SystemRedis, "redisstore", code, cfg); err != nil {
		t.Fatalf("New: %v", err)
	}
	if len(own) != 1 {
		t.Fatalf("the store's own sorter took %d hooks, want 1", len(own))
	}
}

// recorder is a TracerProvider that keeps its spans.
type recorder struct {
	embedded.TracerProvider
	mu    sync.Mutex
	spans []*span
}

type tracer struct {
	embedded.Tracer
	r *recorder
}

type span struct {
	noop.Span
	name   string
	kind   trace.SpanKind
	events []string
	status codes.Code
	ended  bool
}

func (r *recorder) Tracer(string, ...trace.TracerOption) trace.Tracer { return tracer{r: r} }

func (t tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	r := t.r
	cfg := trace.NewSpanStartConfig(opts...)
	s := &span{name: name, kind: cfg.SpanKind()}
	r.mu.Lock()
	r.spans = append(r.spans, s)
	r.mu.Unlock()
	return trace.ContextWithSpan(ctx, s), s
}

func (s *span) IsRecording() bool                         { return true }
func (s *span) AddEvent(n string, _ ...trace.EventOption) { s.events = append(s.events, n) }
func (s *span) SetStatus(c codes.Code, _ string)          { s.status = c }
func (s *span) End(...trace.SpanEndOption)                { s.ended = true }

// Under a recorded span each Do is a client span with a retry event per
// retry, its status an error when it failed; under none, no span.
func TestDoSpans(t *testing.T) {
	rec := &recorder{}
	in, err := storeinstr.New(storeinstr.SystemRedis, "redisstore", code, storeinstr.Config{Policy: quick, TracerProvider: rec})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Do(t.Context(), storeinstr.OpGet, func(context.Context, int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if len(rec.spans) != 0 {
		t.Fatalf("%d spans without a recorded parent, want none", len(rec.spans))
	}
	ctx := trace.ContextWithSpan(t.Context(), &span{})
	_ = in.Do(ctx, storeinstr.OpClaim, func(_ context.Context, attempt int) error {
		if attempt == 1 {
			return codeErr{"LOADING", retry.Transient}
		}
		return nil
	})
	_ = in.Do(ctx, storeinstr.OpFail, func(context.Context, int) error { return codeErr{"NOPERM", retry.Misconfigured} })
	if len(rec.spans) != 2 {
		t.Fatalf("%d spans, want 2", len(rec.spans))
	}
	claim, fail := rec.spans[0], rec.spans[1]
	if claim.name != "claim redis" || claim.kind != trace.SpanKindClient || len(claim.events) != 1 || claim.status == codes.Error || !claim.ended {
		t.Errorf("claim span %+v", claim)
	}
	if fail.name != "fail redis" || fail.status != codes.Error || !fail.ended {
		t.Errorf("fail span %+v", fail)
	}
}

// A request that succeeds first time, with no hooks, no span in its
// context and no SDK behind the OpenTelemetry API, allocates nothing in
// the instruments: the price every store pays on each call.
func TestDoSuccessAllocatesNothing(t *testing.T) {
	in, err := storeinstr.New(storeinstr.SystemRedis, "redisstore", code, storeinstr.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := func(context.Context, int) error { return nil }
	for _, op := range []string{storeinstr.OpClaim, storeinstr.OpComplete, storeinstr.OpOutboxLease} {
		if n := testing.AllocsPerRun(100, func() { _ = in.Do(ctx, op, call) }); n != 0 {
			t.Errorf("%s: %v allocations per successful call, want 0", op, n)
		}
	}
}
