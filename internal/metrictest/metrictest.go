package metrictest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Provider returns a MeterProvider that records into the returned reader,
// shut down when the test ends.
func Provider(t testing.TB) (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return reader, mp
}

// Counter sums the points of an int64 counter whose attributes include all
// of want.
func Counter(t testing.TB, r *sdkmetric.ManualReader, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	var n int64
	for _, m := range collect(t, r, name) {
		sum, ok := m.Data.(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("%s is %T, want an int64 sum", name, m.Data)
		}
	points:
		for _, p := range sum.DataPoints {
			for _, kv := range want {
				if v, ok := p.Attributes.Value(kv.Key); !ok || v != kv.Value {
					continue points
				}
			}
			n += p.Value
		}
	}
	return n
}

// Gauge returns the last value of a float64 gauge, and whether it has one.
func Gauge(t testing.TB, r *sdkmetric.ManualReader, name string) (float64, bool) {
	t.Helper()
	for _, m := range collect(t, r, name) {
		g, ok := m.Data.(metricdata.Gauge[float64])
		if !ok {
			t.Fatalf("%s is %T, want a float64 gauge", name, m.Data)
		}
		if n := len(g.DataPoints); n > 0 {
			return g.DataPoints[n-1].Value, true
		}
	}
	return 0, false
}

// collect reads the metrics called name.
func collect(t testing.TB, r *sdkmetric.ManualReader, name string) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				out = append(out, m)
			}
		}
	}
	return out
}
