package metrictest

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	"go.opentelemetry.io/otel/metric/noop"
)

// Reader holds what the instruments of one Provider recorded.
type Reader struct {
	mu sync.Mutex
	// sums of synchronous counters, per instrument and attribute set
	sums map[string]map[attribute.Distinct]point
	// last values of gauges and observed instruments
	last      map[string]map[attribute.Distinct]point
	hists     map[string]*hist
	callbacks []func(context.Context, metric.Observer) error
}

type hist struct {
	count uint64
	sum   float64
}

type point struct {
	attrs attribute.Set
	value float64
}

// Provider returns a MeterProvider whose instruments record into the
// returned Reader. It implements only the OpenTelemetry API, so the
// library's tests need no SDK; observable instruments are read when a
// value is asked for, as an SDK reader's Collect would.
func Provider(t testing.TB) (*Reader, metric.MeterProvider) {
	r := &Reader{
		sums:  map[string]map[attribute.Distinct]point{},
		last:  map[string]map[attribute.Distinct]point{},
		hists: map[string]*hist{},
	}
	return r, meterProvider{r: r}
}

// Counter sums the points of a counter whose attributes include all of
// want.
func Counter(t testing.TB, r *Reader, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	r.collect(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	var n float64
	for _, m := range []map[string]map[attribute.Distinct]point{r.sums, r.last} {
		for _, p := range m[name] {
			if matches(p.attrs, want) {
				n += p.value
			}
		}
	}
	return int64(n)
}

// Histogram returns how many values a histogram recorded, and their sum.
func Histogram(t testing.TB, r *Reader, name string) (count uint64, sum float64) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.hists[name]; h != nil {
		return h.count, h.sum
	}
	return 0, 0
}

// Gauge returns the value of a gauge, and whether it has one.
func Gauge(t testing.TB, r *Reader, name string) (float64, bool) {
	t.Helper()
	r.collect(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.last[name] {
		return p.value, true
	}
	return 0, false
}

func matches(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// collect runs the registered callbacks, as a reader's Collect does.
func (r *Reader) collect(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	cbs := append([]func(context.Context, metric.Observer) error(nil), r.callbacks...)
	r.mu.Unlock()
	for _, cb := range cbs {
		if err := cb(t.Context(), observer{r: r}); err != nil {
			t.Fatalf("metric callback: %v", err)
		}
	}
}

func (r *Reader) add(name string, v float64, opts []metric.AddOption) {
	set := metric.NewAddConfig(opts).Attributes()
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.sums[name]
	if m == nil {
		m = map[attribute.Distinct]point{}
		r.sums[name] = m
	}
	p := m[set.Equivalent()]
	m[set.Equivalent()] = point{attrs: set, value: p.value + v}
}

func (r *Reader) set(name string, v float64, set attribute.Set) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.last[name]
	if m == nil {
		m = map[attribute.Distinct]point{}
		r.last[name] = m
	}
	m[set.Equivalent()] = point{attrs: set, value: v}
}

func (r *Reader) register(cb func(context.Context, metric.Observer) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.callbacks = append(r.callbacks, cb)
}

type meterProvider struct {
	embedded.MeterProvider
	r *Reader
}

func (p meterProvider) Meter(string, ...metric.MeterOption) metric.Meter { return meter{r: p.r} }

// meter records the instruments the library uses; any other comes from
// noop.Meter and records nothing.
type meter struct {
	noop.Meter
	r *Reader
}

func (m meter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return int64Counter{r: m.r, name: name}, nil
}

func (m meter) Float64Histogram(name string, _ ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return float64Histogram{r: m.r, name: name}, nil
}

func (m meter) Int64Histogram(name string, _ ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	return int64Histogram{f: float64Histogram{r: m.r, name: name}}, nil
}

func (m meter) Int64Gauge(name string, _ ...metric.Int64GaugeOption) (metric.Int64Gauge, error) {
	return int64Gauge{r: m.r, name: name}, nil
}

func (m meter) Int64ObservableCounter(name string, opts ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	inst := int64Observable{name: name}
	for _, cb := range metric.NewInt64ObservableCounterConfig(opts...).Callbacks() {
		m.r.register(int64Callback(inst, cb))
	}
	return inst, nil
}

func (m meter) Int64ObservableGauge(name string, opts ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	inst := int64Observable{name: name}
	for _, cb := range metric.NewInt64ObservableGaugeConfig(opts...).Callbacks() {
		m.r.register(int64Callback(inst, cb))
	}
	return inst, nil
}

func (m meter) Float64ObservableGauge(name string, opts ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	inst := float64Observable{name: name}
	for _, cb := range metric.NewFloat64ObservableGaugeConfig(opts...).Callbacks() {
		m.r.register(func(ctx context.Context, o metric.Observer) error {
			return cb(ctx, float64Observer{r: m.r, name: name})
		})
	}
	return inst, nil
}

func (m meter) RegisterCallback(cb metric.Callback, _ ...metric.Observable) (metric.Registration, error) {
	m.r.register(func(ctx context.Context, o metric.Observer) error { return cb(ctx, o) })
	return registration{}, nil
}

func int64Callback(inst int64Observable, cb metric.Int64Callback) func(context.Context, metric.Observer) error {
	return func(ctx context.Context, o metric.Observer) error {
		return cb(ctx, int64Observer{r: o.(observer).r, name: inst.name})
	}
}

type int64Counter struct {
	embedded.Int64Counter
	r    *Reader
	name string
}

func (c int64Counter) Add(_ context.Context, v int64, opts ...metric.AddOption) {
	c.r.add(c.name, float64(v), opts)
}
func (c int64Counter) Enabled(context.Context) bool { return true }

type float64Histogram struct {
	embedded.Float64Histogram
	r    *Reader
	name string
}

func (h float64Histogram) Record(_ context.Context, v float64, _ ...metric.RecordOption) {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	hs := h.r.hists[h.name]
	if hs == nil {
		hs = &hist{}
		h.r.hists[h.name] = hs
	}
	hs.count++
	hs.sum += v
}
func (h float64Histogram) Enabled(context.Context) bool { return true }

type int64Histogram struct {
	embedded.Int64Histogram
	f float64Histogram
}

func (h int64Histogram) Record(ctx context.Context, v int64, opts ...metric.RecordOption) {
	h.f.Record(ctx, float64(v), opts...)
}
func (h int64Histogram) Enabled(context.Context) bool { return true }

type int64Gauge struct {
	embedded.Int64Gauge
	r    *Reader
	name string
}

func (g int64Gauge) Record(_ context.Context, v int64, opts ...metric.RecordOption) {
	g.r.set(g.name, float64(v), metric.NewRecordConfig(opts).Attributes())
}
func (g int64Gauge) Enabled(context.Context) bool { return true }

type int64Observable struct {
	metric.Int64Observable
	embedded.Int64ObservableCounter
	embedded.Int64ObservableGauge
	name string
}

type float64Observable struct {
	metric.Float64Observable
	embedded.Float64ObservableGauge
	name string
}

type int64Observer struct {
	embedded.Int64Observer
	r    *Reader
	name string
}

func (o int64Observer) Observe(v int64, opts ...metric.ObserveOption) {
	o.r.set(o.name, float64(v), metric.NewObserveConfig(opts).Attributes())
}

type float64Observer struct {
	embedded.Float64Observer
	r    *Reader
	name string
}

func (o float64Observer) Observe(v float64, opts ...metric.ObserveOption) {
	o.r.set(o.name, v, metric.NewObserveConfig(opts).Attributes())
}

type observer struct {
	embedded.Observer
	r *Reader
}

func (o observer) ObserveInt64(inst metric.Int64Observable, v int64, opts ...metric.ObserveOption) {
	if i, ok := inst.(int64Observable); ok {
		o.r.set(i.name, float64(v), metric.NewObserveConfig(opts).Attributes())
	}
}

func (o observer) ObserveFloat64(inst metric.Float64Observable, v float64, opts ...metric.ObserveOption) {
	if i, ok := inst.(float64Observable); ok {
		o.r.set(i.name, v, metric.NewObserveConfig(opts).Attributes())
	}
}

type registration struct{ embedded.Registration }

func (registration) Unregister() error { return nil }
