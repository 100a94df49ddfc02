// Package healthmetrics shows how a worker exposes onceq's metrics in
// Prometheus's format, with OpenTelemetry's Prometheus exporter, and its
// health endpoints, from the worker's own module: onceq itself speaks only
// the OpenTelemetry API.
package healthmetrics

import (
	"fmt"
	"net/http"

	"github.com/onceq/onceq/consumer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Metrics returns a meter provider to give the consumer (and the source
// and store) with WithMeterProvider, and the handler that serves what it
// measures in Prometheus's text format. A registry of its own, not the
// process-wide default, so that two in one process never collide. Shut
// the provider down when the worker stops.
func Metrics() (*sdkmetric.MeterProvider, http.Handler, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}

// Mux serves metrics on /metrics and c's health on /healthz/readyz and
// /healthz/livez.
func Mux(c *consumer.Consumer, metrics http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.Handle("/healthz/", c.HealthHandler())
	return mux
}
