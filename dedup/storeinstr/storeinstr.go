package storeinstr

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/internal/hookset"
	"github.com/onceq/onceq/internal/logref"
	"github.com/onceq/onceq/retry"
)

const instrumentationName = "github.com/onceq/onceq/dedup/storeinstr"

// Metric names, the same for every store.
const (
	MetricDuration = "db.client.operation.duration"
	MetricErrors   = "onceq.store.errors"
	MetricRetries  = "onceq.store.retries"
)

// Attribute keys, the same for every store. db.system.name,
// db.response.status_code and error.type are OpenTelemetry's database
// semantic conventions; onceq.store.operation is the key the consumer's
// onceq.store.calls uses.
const (
	AttrSystem     = attribute.Key("db.system.name")
	AttrOperation  = attribute.Key("onceq.store.operation")
	AttrStatusCode = attribute.Key("db.response.status_code")
	AttrErrorType  = attribute.Key("error.type")
	AttrThrottle   = attribute.Key("onceq.throttle")
	AttrRetryClass = attribute.Key("onceq.retry.class")
)

// Values of db.system.name, one per store.
const (
	SystemDynamoDB   = "aws.dynamodb"
	SystemPostgreSQL = "postgresql"
	SystemRedis      = "redis"
)

// Store operations, the values of onceq.store.operation and the op of
// every hook.
const (
	OpClaim         = "claim"
	OpClaimComplete = "claim_complete"
	OpComplete      = "complete"
	OpFail          = "fail"
	OpExtend        = "extend"
	OpGet           = "get"
	OpCheck         = "check"
	// OpReset is an operator's reset of a record (dedup.Resetter).
	OpReset = "reset"
	// The relay's calls on a Store's outbox (package outbox).
	OpOutboxLease      = "outbox_lease"
	OpOutboxDispatched = "outbox_dispatched"
	OpOutboxRetry      = "outbox_retry"
	OpOutboxRelease    = "outbox_release"
	OpOutboxDead       = "outbox_dead"
	OpOutboxEntries    = "outbox_entries"
	OpOutboxRequeue    = "outbox_requeue"
)

// CodeUnknown is db.response.status_code of an error the database gave no
// code to (a reset connection, a timeout).
const CodeUnknown = "unknown"

// maxAttrSets bounds the attribute-set cache: error codes come from the
// wire, so a misbehaving server must not grow it without end.
const maxAttrSets = 512

// Config is what a store's options give its instruments: each store's
// WithRetryPolicy, WithHooks, WithLogger, WithMeterProvider and
// WithTracerProvider set one field.
type Config struct {
	// Policy retries throttles and transient faults; the zero Policy is
	// retry.DefaultPolicy().
	Policy retry.Policy
	// Hooks are the store's hooks (its WithHooks). New keeps those that
	// implement HookStoreCall or HookStoreRetry and offers each to Own;
	// it refuses one that neither takes.
	Hooks []Hook
	// Own sorts a hook into the store's own hook lists (hookset.Into):
	// each reports whether it took the hook. Nil for a store with no hook
	// interfaces of its own.
	Own []func(h any) bool
	// Logger, when nil, is the logger a Guard hands over (Attach), else
	// slog.Default().
	Logger         *slog.Logger
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Instruments are one store's retries, metrics, hooks, logger and spans.
// It is safe for concurrent use.
type Instruments struct {
	system, pkg string
	code        func(error) string
	policy      retry.Policy
	calls       []HookStoreCall
	retryHooks  []HookStoreRetry
	logs        *logref.Ref
	log         *slog.Logger
	tracer      trace.Tracer
	duration    metric.Float64Histogram
	errors      metric.Int64Counter
	retries     metric.Int64Counter
	// observers are told of every retry: the observer each Guard over the
	// store handed over (Attach).
	observers retry.Observers

	// Attribute sets, and the options that carry them, are built once per
	// combination: building one per call would allocate on every request.
	// ok holds a success's duration options for every operation, built in
	// New and only read after, so the common case takes no lock.
	ok   map[string][]metric.RecordOption
	mu   sync.RWMutex
	sets map[setKey]options
}

// options carry one attribute set, as the slices Record and Add take (a
// slice passed whole is not allocated again on each call).
type options struct {
	rec []metric.RecordOption
	add []metric.AddOption
}

// ops are the operations of every store, whose successes New prepares.
var ops = [...]string{OpClaim, OpClaimComplete, OpComplete, OpFail, OpExtend, OpGet, OpCheck, OpReset,
	OpOutboxLease, OpOutboxDispatched, OpOutboxRetry, OpOutboxRelease, OpOutboxDead, OpOutboxEntries, OpOutboxRequeue}

type setKey struct {
	metric, op, code string
	class            retry.Class
}

// New returns the instruments of a store: system is its db.system.name,
// pkg its package name (for log lines and errors), code the database's
// error code of an error ("" when it has none). A hook of cfg.Hooks that
// implements neither this package's hook interfaces nor one cfg.Own
// takes (a nil one included) is refused, so a misspelt method is an
// error, not silence; errors wrap configerr.ErrInvalidConfig.
func New(system, pkg string, code func(error) string, cfg Config) (*Instruments, error) {
	if cfg.Policy == (retry.Policy{}) {
		cfg.Policy = retry.DefaultPolicy()
	}
	in := &Instruments{system: system, pkg: pkg, code: code, policy: cfg.Policy, sets: map[setKey]options{}}
	in.ok = make(map[string][]metric.RecordOption, len(ops))
	for _, op := range ops {
		in.ok[op] = in.build(setKey{metric: MetricDuration, op: op, class: -1}).rec
	}
	sorters := append([]func(h any) bool{hookset.Into(&in.calls), hookset.Into(&in.retryHooks)}, cfg.Own...)
	if err := hookset.Collect(pkg, configerr.ErrInvalidConfig, cfg.Hooks, sorters...); err != nil {
		return nil, fmt.Errorf("%s: %w", pkg, err)
	}
	in.logs = logref.New(cfg.Logger)
	in.log = in.logs.Logger()
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	in.tracer = tp.Tracer(instrumentationName)
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	var errs [3]error
	in.duration, errs[0] = m.Float64Histogram(MetricDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of every request a dedup store sent to its database, retries included, by db.system.name, onceq.store.operation and, when it failed, error.type (the retry class)."))
	in.errors, errs[1] = m.Int64Counter(MetricErrors,
		metric.WithDescription("Dedup store requests that returned an error, by db.system.name, onceq.store.operation and db.response.status_code; onceq.throttle marks throttles (a condition that said no is a decision, counted under its own code)."))
	in.retries, errs[2] = m.Int64Counter(MetricRetries,
		metric.WithDescription("Dedup store requests retried after a backoff, by db.system.name, onceq.store.operation, db.response.status_code and onceq.retry.class (throttled, transient)."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("%s: %w: metrics: %w", pkg, configerr.ErrInvalidConfig, err)
	}
	return in, nil
}

// Logger is the store's logger: the one given in Config, else the last
// non-nil one a Guard handed over (Attach), else slog.Default() when each
// line is logged.
func (in *Instruments) Logger() *slog.Logger { return in.log }

// Attach takes what a Guard over the store hands over, as a store's
// dedup.Store.Attach: its logger, used unless Config gave one, and its
// retry observer, told of every retry from then on (each Guard's, when
// several share the store).
func (in *Instruments) Attach(rt dedup.Runtime) {
	in.logs.Inherit(rt.Logger)
	in.observers.Add(rt.Observe)
}

// Do runs call, one request to the database, under the retry policy:
// again after a backoff while its error's class (retry.Classify) is
// Throttled or Transient. call learns its attempt number (1 first), so
// that a conditional write retried after an ambiguous failure can tell
// its own earlier success, which may have committed unseen, from another
// writer's. Every attempt is timed and counted, failures by their code,
// and told to the hooks; every retry is counted, told to the hooks and to
// the retry observers handed over (Attach), and logged. Do returns
// call's last error.
func (in *Instruments) Do(ctx context.Context, op string, call func(ctx context.Context, attempt int) error) error {
	var span trace.Span
	if trace.SpanFromContext(ctx).IsRecording() {
		ctx, span = in.tracer.Start(ctx, op+" "+in.system, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(AttrSystem.String(in.system), AttrOperation.String(op)))
	}
	attempt := 0
	err := in.policy.Do(ctx, func(ctx context.Context) error {
		attempt++
		start := time.Now()
		err := call(ctx, attempt)
		took := time.Since(start)
		for _, h := range in.calls {
			h.OnStoreCall(ctx, op, took, err)
		}
		in.requested(ctx, op, took, err)
		return err
	}, func(c retry.Class, err error) {
		raw := in.code(err)
		for _, h := range in.retryHooks {
			h.OnStoreRetry(ctx, op, c, raw)
		}
		code := cmp.Or(raw, CodeUnknown)
		in.retries.Add(ctx, 1, in.set(setKey{metric: MetricRetries, op: op, code: code, class: c}).add...)
		if span != nil {
			span.AddEvent("retry", trace.WithAttributes(AttrRetryClass.String(c.String()), AttrStatusCode.String(code)))
		}
		in.log.DebugContext(ctx, in.pkg+": retrying", "op", op, "class", c.String(), "error_code", code, "err", err)
		in.observers.Observe(c, err)
	})
	if c := retry.Classify(err); err != nil && c.Retryable() {
		// Retries ran out: the caller gets the error, the operator the code.
		in.log.WarnContext(ctx, in.pkg+": giving up", "op", op, "class", c.String(), "error_code", in.codeOf(err), "attempts", attempt, "err", err)
	}
	if span != nil {
		if err != nil && retry.Classify(err) != retry.ConditionFailed {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	return err
}

// requested counts one request: its duration, and its error if any.
func (in *Instruments) requested(ctx context.Context, op string, took time.Duration, err error) {
	if err == nil {
		o, ok := in.ok[op]
		if !ok {
			o = in.set(setKey{metric: MetricDuration, op: op, class: -1}).rec
		}
		in.duration.Record(ctx, took.Seconds(), o...)
		return
	}
	class := retry.Classify(err)
	code := in.codeOf(err)
	in.duration.Record(ctx, took.Seconds(), in.set(setKey{metric: MetricDuration, op: op, class: class}).rec...)
	// A throttle's code counts as one wherever it appears (a throttled
	// cancellation reason too), whatever class the error states.
	if class != retry.Throttled && retry.Classify(codeError(code)) == retry.Throttled {
		class = retry.Throttled
	}
	if class != retry.Throttled {
		class = retry.Transient // the errors metric tells throttles only
	}
	in.errors.Add(ctx, 1, in.set(setKey{metric: MetricErrors, op: op, code: code, class: class}).add...)
}

func (in *Instruments) codeOf(err error) string { return cmp.Or(in.code(err), CodeUnknown) }

// set is the options carrying the attribute set of k, built once.
func (in *Instruments) set(k setKey) options {
	in.mu.RLock()
	o, ok := in.sets[k]
	in.mu.RUnlock()
	if ok {
		return o
	}
	o = in.build(k)
	in.mu.Lock()
	if len(in.sets) < maxAttrSets {
		in.sets[k] = o
	}
	in.mu.Unlock()
	return o
}

// build makes the options carrying the attribute set of k.
func (in *Instruments) build(k setKey) options {
	attrs := []attribute.KeyValue{AttrSystem.String(in.system), AttrOperation.String(k.op)}
	switch k.metric {
	case MetricDuration:
		if k.class >= 0 {
			attrs = append(attrs, AttrErrorType.String(k.class.String()))
		}
	case MetricErrors:
		attrs = append(attrs, AttrStatusCode.String(k.code), AttrThrottle.Bool(k.class == retry.Throttled))
	case MetricRetries:
		attrs = append(attrs, AttrStatusCode.String(k.code), AttrRetryClass.String(k.class.String()), AttrThrottle.Bool(k.class == retry.Throttled))
	}
	s := metric.WithAttributeSet(attribute.NewSet(attrs...))
	return options{rec: []metric.RecordOption{s}, add: []metric.AddOption{s}}
}

// codeError is a bare error code, to classify.
type codeError string

func (c codeError) Error() string     { return string(c) }
func (c codeError) ErrorCode() string { return string(c) }
