package outbox

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName names the relay's tracer and meter.
const instrumentationName = "github.com/onceq/onceq/outbox"

const (
	attrResult = attribute.Key("onceq.result")
	attrReason = attribute.Key("onceq.reason")
	attrCount  = attribute.Key("messaging.batch.message_count")
)

// The results an entry's send ends in, as onceq.outbox.sends counts them.
const (
	resultDispatched = "dispatched"
	resultRetry      = "retry"
	resultDead       = "dead"
	resultLeaseLost  = "lease_lost"
)

// telemetry is the relay's metrics and spans, through the OpenTelemetry
// API only.
type telemetry struct {
	tracer      trace.Tracer
	meter       metric.Meter
	sends       metric.Int64Counter
	latency     metric.Float64Histogram
	redispatch  metric.Int64Counter
	takeovers   metric.Int64Counter
	backlog     metric.Int64ObservableGauge
	oldest      metric.Float64ObservableGauge
	sendOpts    map[string]metric.AddOption
	retriedOpt  metric.AddOption
	takenOvrOpt metric.AddOption
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) (*telemetry, error) {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	t := &telemetry{tracer: tp.Tracer(instrumentationName), meter: m, sendOpts: map[string]metric.AddOption{}}
	for _, r := range []string{resultDispatched, resultRetry, resultDead, resultLeaseLost} {
		t.sendOpts[r] = metric.WithAttributeSet(attribute.NewSet(attrResult.String(r)))
	}
	t.retriedOpt = metric.WithAttributeSet(attribute.NewSet(attrReason.String("retry")))
	t.takenOvrOpt = metric.WithAttributeSet(attribute.NewSet(attrReason.String("takeover")))
	var errs [6]error
	t.sends, errs[0] = m.Int64Counter("onceq.outbox.sends", metric.WithDescription(
		"Outbox entries a relay sent, by result: dispatched (the destination took it), retry (given back to be sent again: after a failure of the moment, or unsent, behind such a failure in its lane or when the relay stopped), dead (refused for good), lease_lost (sent or tried, but another relay had taken it over, so its mark was refused and it is sent again)."))
	t.latency, errs[1] = m.Float64Histogram("onceq.outbox.dispatch.latency", metric.WithUnit("s"), metric.WithDescription(
		"Time from an entry's commit, with its input's COMPLETED record, to its dispatch."))
	t.redispatch, errs[2] = m.Int64Counter("onceq.outbox.redispatches", metric.WithDescription(
		"Entries sent again, by reason: retry (an earlier send of it failed) or takeover (an earlier relay's lease on it ran out, so it may have been sent); an onceq consumer downstream absorbs the copy as a duplicate."))
	t.takeovers, errs[3] = m.Int64Counter("onceq.outbox.takeovers", metric.WithDescription(
		"Entries a relay leased after another relay's lease on them ran out: that relay died or stalled past its lease TTL."))
	t.backlog, errs[4] = m.Int64ObservableGauge("onceq.outbox.backlog", metric.WithDescription(
		"Outbox entries pending dispatch (counted up to 10000, read from the store at most once a minute)."))
	t.oldest, errs[5] = m.Float64ObservableGauge("onceq.outbox.backlog.oldest_age", metric.WithUnit("s"), metric.WithDescription(
		"How long ago the oldest pending outbox entry was committed; absent while none is pending."))
	return t, errors.Join(errs[:]...)
}

// backlogEvery bounds how often the backlog is read from the store: a
// collection in between reports the last reading. Reading it lists the
// pending entries (on DynamoDB a Scan of the outbox table).
const backlogEvery = time.Minute

// backlogReading is the last count of the pending entries.
type backlogReading struct {
	mu      sync.Mutex
	at      time.Time // when it was read; zero: never
	pending int
	oldest  time.Time // zero: none pending
}

// observeBacklog reports the store's pending entries at each collection,
// while the relay runs, read at most once per backlogEvery.
func (t *telemetry) observeBacklog(store Store) (metric.Registration, error) {
	var last backlogReading
	return t.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		last.mu.Lock()
		defer last.mu.Unlock()
		if last.at.IsZero() || time.Since(last.at) >= backlogEvery {
			pending, err := store.Entries(ctx, Pending, defaultBacklogCounted)
			if err != nil {
				return err
			}
			last.at, last.pending, last.oldest = time.Now(), len(pending), time.Time{}
			for _, e := range pending {
				if last.oldest.IsZero() || e.CreatedAt.Before(last.oldest) {
					last.oldest = e.CreatedAt
				}
			}
		}
		o.ObserveInt64(t.backlog, int64(last.pending))
		if !last.oldest.IsZero() {
			o.ObserveFloat64(t.oldest, time.Since(last.oldest).Seconds())
		}
		return nil
	}, t.backlog, t.oldest)
}

func (t *telemetry) sent(ctx context.Context, result string, n int) {
	if n > 0 {
		t.sends.Add(ctx, int64(n), t.sendOpts[result])
	}
}
