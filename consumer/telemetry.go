package consumer

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup/cache"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// instrumentationName names the tracer and meter.
const instrumentationName = "github.com/onceq/onceq/consumer"

// Attribute keys: OpenTelemetry's messaging conventions, plus onceq's own.
const (
	attrMessagingSystem = attribute.Key("messaging.system")
	attrDestination     = attribute.Key("messaging.destination.name")
	attrMessageID       = attribute.Key("messaging.message.id")
	attrOperationType   = attribute.Key("messaging.operation.type")
	attrOperationName   = attribute.Key("messaging.operation.name")
	attrPartition       = attribute.Key("messaging.destination.partition.id")
	attrKafkaOffset     = attribute.Key("messaging.kafka.offset")
	attrBodySize        = attribute.Key("messaging.message.body.size")
	attrOutcome         = attribute.Key("onceq.outcome")
	attrDedupStatus     = attribute.Key("onceq.dedup.status")
	attrAttempt         = attribute.Key("onceq.attempt")    // Outcome.Attempt
	attrDeliveries      = attribute.Key("onceq.deliveries") // Message.Deliveries
	attrStoreOperation  = attribute.Key("onceq.store.operation")
	attrAction          = attribute.Key("onceq.action")
	attrHeartbeatKind   = attribute.Key("onceq.heartbeat")
	attrResult          = attribute.Key("onceq.result")
	attrPreviousStatus  = attribute.Key("onceq.previous_status")
)

// telemetry is the consumer's tracing and metrics, through the OpenTelemetry
// API only: the application picks the SDK and exporters.
type telemetry struct {
	tracer trace.Tracer
	// spansOff is true when the tracer provider records nothing, so that
	// starting a span would only allocate (three allocations a message).
	// globalTP is the global provider it was decided for: once the
	// application sets another, spans are started again.
	spansOff   bool
	globalTP   trace.TracerProvider
	propagator propagation.TextMapPropagator
	meter      metric.Meter

	messages    metric.Int64Counter
	handlerTime metric.Float64Histogram
	storeCalls  metric.Int64Counter
	storeTime   metric.Float64Histogram
	expired     metric.Int64Counter
	inFlight    metric.Int64Gauge
	limit       metric.Int64Gauge
	settles     metric.Int64Counter
	heartbeats  metric.Int64Counter
	keptDead    metric.Int64Counter
	takeovers   metric.Int64Counter

	// Attribute options are built ahead, once per combination: building
	// them per message would cost more than the rest of the path. Per store
	// operation, result and kind they are fixed; per origin (system,
	// destination) they are made on first sight.
	store         [numStoreOps]storeOptions
	handler       [2]measurement // by result: ok, error
	heartbeatOpts [2][2]measurement
	origins       sync.Map // originKey → *originOptions
}

// measurement holds ready option slices: a variadic argument to an
// interface method escapes, so even the slice is built once.
type measurement struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func newMeasurement(kvs ...attribute.KeyValue) measurement {
	set := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return measurement{add: []metric.AddOption{set}, rec: []metric.RecordOption{set}}
}

// storeOp names a store call in spans and metrics.
type storeOp int

const (
	opClaim storeOp = iota
	opComplete
	opTransaction // a Complete with business writes or outgoing messages
	opClaimComplete
	opFail
	opExtend
	numStoreOps
)

var storeOpNames = [numStoreOps]string{"claim", "complete", "transaction", "claim_complete", "fail", "extend"}

type storeOptions struct {
	span     string         // the span name
	calls    [2]measurement // by result: ok, error
	duration measurement
}

type originKey struct{ system, destination string }

// originOptions are the options of one origin's metrics.
type originOptions struct {
	span     string // the process span's name
	messages [numKinds]measurement
	takeover measurement
	settles  [numActions][2]measurement
}

// results names a call's result, by resultIndex.
var results = [2]string{"ok", "error"}

// resultIndex is the index of a result in the option arrays: 0 ok, 1 error.
func resultIndex(err error) int {
	if err != nil {
		return 1
	}
	return 0
}

// origin returns the options of m's origin.
func (t *telemetry) origin(o Origin) *originOptions {
	k := originKey{o.System, o.Destination}
	oo, ok := t.origins.Load(k)
	if !ok {
		oo, _ = t.origins.LoadOrStore(k, newOriginOptions(k))
	}
	return oo.(*originOptions)
}

func newOriginOptions(k originKey) *originOptions {
	oo := &originOptions{span: "process " + k.destination}
	sys, dest := attrMessagingSystem.String(k.system), attrDestination.String(k.destination)
	for kind := range oo.messages {
		oo.messages[kind] = newMeasurement(attrOutcome.String(Kind(kind).String()), sys, dest)
	}
	oo.takeover = newMeasurement(sys, dest)
	for a := range oo.settles {
		for r, result := range results {
			oo.settles[a][r] = newMeasurement(attrAction.String(Action(a).String()), attrResult.String(result), sys)
		}
	}
	return oo
}

// notRecording stands in for the spans not worth starting: children of a
// span nobody records.
var notRecording = trace.SpanFromContext(context.Background())

var consumerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

// recordsNothing reports providers known to drop every span: OpenTelemetry's
// no-op, and the global provider while no application provider is set
// (its type is internal, so it is known by its package).
func recordsNothing(tp trace.TracerProvider) bool {
	if _, ok := tp.(noop.TracerProvider); ok {
		return true
	}
	t := reflect.TypeOf(tp)
	return t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global"
}

// tracing reports whether spans may be recorded.
func (t *telemetry) tracing() bool {
	if !t.spansOff {
		return true
	}
	return t.globalTP != nil && otel.GetTracerProvider() != t.globalTP
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider, prop propagation.TextMapPropagator) (*telemetry, error) {
	var globalTP trace.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
		globalTP = tp
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if prop == nil {
		prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	m := mp.Meter(instrumentationName)
	t := &telemetry{tracer: tp.Tracer(instrumentationName), meter: m, propagator: prop,
		spansOff: recordsNothing(tp), globalTP: globalTP}
	for r, result := range results {
		res := attrResult.String(result)
		t.handler[r] = newMeasurement(res)
		t.heartbeatOpts[0][r] = newMeasurement(attrHeartbeatKind.String("visibility"), res)
		t.heartbeatOpts[1][r] = newMeasurement(attrHeartbeatKind.String("lease"), res)
	}
	for op, name := range storeOpNames {
		so := &t.store[op]
		so.span, so.duration = "onceq."+name, newMeasurement(attrStoreOperation.String(name))
		for r, result := range results {
			so.calls[r] = newMeasurement(attrStoreOperation.String(name), attrResult.String(result))
		}
	}
	var errs [11]error
	t.messages, errs[0] = m.Int64Counter("onceq.messages", metric.WithDescription("Messages processed, by outcome."))
	t.handlerTime, errs[1] = m.Float64Histogram("onceq.handler.duration", metric.WithUnit("s"), metric.WithDescription("Handler call duration."))
	t.storeCalls, errs[2] = m.Int64Counter("onceq.store.calls", metric.WithDescription("Dedup store calls, by operation and result."))
	t.storeTime, errs[3] = m.Float64Histogram("onceq.store.duration", metric.WithUnit("s"), metric.WithDescription("Dedup store call duration, by operation."))
	t.expired, errs[4] = m.Int64Counter("onceq.dedup.expired_present",
		metric.WithDescription("Claims that found an expired record still stored (DynamoDB's TTL deletes expired items up to 48 hours late)."))
	t.inFlight, errs[5] = m.Int64Gauge("onceq.in_flight", metric.WithDescription("Messages held: running, queued behind their key or waiting to retry."))
	t.limit, errs[6] = m.Int64Gauge("onceq.concurrency.limit", metric.WithDescription("The adaptive concurrency limit: lowered on store throttles, raised as calls succeed."))
	t.settles, errs[7] = m.Int64Counter("onceq.source.settles", metric.WithDescription("Source actions (ack, retry, dead_letter), by result."))
	t.keptDead, errs[8] = m.Int64Counter("onceq.dead_letters.kept", metric.WithDescription(
		"Messages whose dead-letter copy no destination took, kept in the store as DEAD_LETTER and released; each needs an operator's replay."))
	t.heartbeats, errs[9] = m.Int64Counter("onceq.heartbeats", metric.WithDescription("Lease and visibility extensions, by result."))
	t.takeovers, errs[10] = m.Int64Counter("onceq.takeovers", metric.WithDescription(
		"Claims that took over a lease its holder abandoned (the worker died or its handler ran past the lease); past MaxTakeovers the message is dead-lettered."))
	return t, errors.Join(errs[:]...)
}

// attributeCarrier reads and writes trace context in message attributes
// (SQS message attributes, Kafka headers).
type attributeCarrier map[string]string

func (c attributeCarrier) Get(k string) string { return c[k] }
func (c attributeCarrier) Set(k, v string)     { c[k] = v }
func (c attributeCarrier) Keys() []string      { return slices.Collect(maps.Keys(c)) }

// InjectTraceContext writes ctx's trace context (W3C traceparent and
// baggage) into attrs, for a producer to send with a message so the
// consumer's span continues the producer's trace.
func InjectTraceContext(ctx context.Context, attrs map[string]string) {
	propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}).
		Inject(ctx, attributeCarrier(attrs))
}

// startProcess starts the span of one processing attempt, as a child of
// the trace context the message carries.
func (t *telemetry) startProcess(ctx context.Context, m *Message) (context.Context, trace.Span) {
	if len(m.Attributes) > 0 {
		ctx = t.propagator.Extract(ctx, attributeCarrier(m.Attributes))
	}
	if !t.tracing() {
		// What a no-op tracer would do, without its allocations: the
		// extracted parent, if any, stays in ctx for the handler.
		return ctx, notRecording
	}
	ctx, span := t.tracer.Start(ctx, t.origin(m.Origin).span, consumerSpan...)
	if span.IsRecording() {
		span.SetAttributes(
			attrMessagingSystem.String(m.Origin.System),
			attrDestination.String(m.Origin.Destination),
			attrMessageID.String(m.ID),
			attrOperationType.String("process"),
			attrOperationName.String("process"),
			attrBodySize.Int(len(m.Body)),
			attrDeliveries.Int(m.Deliveries),
		)
		if m.Origin.System == "kafka" {
			span.SetAttributes(attrPartition.String(strconv.Itoa(int(m.Origin.Partition))), attrKafkaOffset.Int64(m.Origin.Offset))
		}
	}
	return ctx, span
}

// endProcess records the outcome on the span and in the metrics.
func (t *telemetry) endProcess(ctx context.Context, span trace.Span, m *Message, o Outcome) {
	if span.IsRecording() {
		span.SetAttributes(attrOutcome.String(o.Kind.String()), attrDedupStatus.String(dedupStatus(o.Kind)), attrAttempt.Int(o.Attempt))
	}
	err := o.Err
	if o.Kind == LeaseLost || o.Kind == InFlightElsewhere || o.Kind == Rejected {
		err = nil // not this processing's failure
	}
	endChild(span, err)
	if k := int(o.Kind); k > 0 && k < numKinds {
		t.messages.Add(ctx, 1, t.origin(m.Origin).messages[k].add...)
	}
}

// dedupStatus is the record state an outcome leaves or found.
func dedupStatus(k Kind) string {
	switch k {
	case Processed, Duplicate, Rejected:
		return "COMPLETED"
	case InFlightElsewhere:
		return "PENDING"
	case Retrying, DeadLettered:
		return "FAILED"
	}
	return ""
}

func endChild(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// beginStore starts a store call's span; endStore ends it and counts it.
func (t *telemetry) beginStore(ctx context.Context, op storeOp) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, notRecording
	}
	return t.tracer.Start(ctx, t.store[op].span, trace.WithSpanKind(trace.SpanKindClient))
}

func (t *telemetry) endStore(ctx context.Context, span trace.Span, op storeOp, start time.Time, err error) {
	endChild(span, err)
	t.storeCalls.Add(ctx, 1, t.store[op].calls[resultIndex(err)].add...)
	t.storeTime.Record(ctx, time.Since(start).Seconds(), t.store[op].duration.rec...)
}

// startHandler starts the handler's span when its parent is recorded.
func (t *telemetry) startHandler(ctx context.Context) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, notRecording
	}
	return t.tracer.Start(ctx, "onceq.handler")
}

func (t *telemetry) handled(ctx context.Context, took time.Duration, err error) {
	t.handlerTime.Record(ctx, took.Seconds(), t.handler[resultIndex(err)].rec...)
}

func (t *telemetry) settled(ctx context.Context, m *Message, a Action, err error) {
	if a > 0 && int(a) < numActions {
		t.settles.Add(ctx, 1, t.origin(m.Origin).settles[a][resultIndex(err)].add...)
	}
}

func (t *telemetry) heartbeat(ctx context.Context, lease bool, err error) {
	kind := 0
	if lease {
		kind = 1
	}
	t.heartbeats.Add(ctx, 1, t.heartbeatOpts[kind][resultIndex(err)].add...)
}

// observeCache reports the COMPLETED-record cache's counters.
func (t *telemetry) observeCache(c *cache.Cache) error {
	hits, err1 := t.meter.Int64ObservableCounter("onceq.cache.hits", metric.WithDescription("Duplicates answered by the COMPLETED-record cache, with no store call."))
	misses, err2 := t.meter.Int64ObservableCounter("onceq.cache.misses", metric.WithDescription("Claims the cache could not answer."))
	evictions, err3 := t.meter.Int64ObservableCounter("onceq.cache.evictions", metric.WithDescription("Records evicted from the cache by its bounds."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	_, err := t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := c.Stats()
		o.ObserveInt64(hits, s.Hits)
		o.ObserveInt64(misses, s.Misses)
		o.ObserveInt64(evictions, s.Evictions)
		return nil
	}, hits, misses, evictions)
	return err
}

// takeover counts a claim of m that took over an abandoned lease.
func (t *telemetry) takeover(ctx context.Context, m *Message) {
	t.takeovers.Add(ctx, 1, t.origin(m.Origin).takeover.add...)
}

// observeOldest reports, at each collection, how long the oldest message
// held has been held: a slow or stuck handler, or a key waiting behind
// another owner's lease, shows here before anything fails.
func (t *telemetry) observeOldest(oldest func(now time.Time) (time.Duration, bool)) (metric.Registration, error) {
	g, err := t.meter.Float64ObservableGauge("onceq.in_flight.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest message this consumer holds has been held since it was received; absent while none is held."))
	if err != nil {
		return nil, err
	}
	return t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if d, ok := oldest(time.Now()); ok {
			o.ObserveFloat64(g, d.Seconds())
		}
		return nil
	}, g)
}
