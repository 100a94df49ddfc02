package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Environment variables of the telemetry (besides the OTLP exporter's own
// OTEL_EXPORTER_OTLP_* settings).
const (
	envTraceStdout = "ONCEQ_TRACE_STDOUT" // "1": spans as JSON on stderr
	envTraceFile   = "ONCEQ_TRACE_FILE"   // with ONCEQ_TRACE_STDOUT=1: to this file instead
	envOTLP        = "OTEL_EXPORTER_OTLP_ENDPOINT"
)

// telemetry owns the OpenTelemetry SDK of the run: the meter provider
// behind /metrics, the tracer provider when an exporter is asked for, and
// the HTTP server with its goroutine. shutdown stops them all.
type telemetry struct {
	meters *sdkmetric.MeterProvider
	tracer *sdktrace.TracerProvider // nil: tracing off
	server *http.Server             // nil: -metrics-addr empty
	served chan error
	addr   string // the bound address, e.g. 127.0.0.1:9464
	closer io.Closer
	// draining turns /healthz to 503 once shutdown began, so a load
	// balancer or orchestrator stops counting on this worker.
	draining atomic.Bool
}

// startTelemetry sets up metrics (a Prometheus registry of the run's own,
// not the process-wide default, so runs in one process never collide) and
// tracing, and serves /metrics and /healthz on addr ("" serves nothing).
// When addr cannot be bound and optional is set (the default address, not
// one the user asked for), it warns and runs without the server: a busy
// port must not stop the embedded demo.
func startTelemetry(ctx context.Context, addr string, optional bool, stderr io.Writer, logger *slog.Logger) (*telemetry, error) {
	t := &telemetry{}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	t.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))

	if err := t.startTracing(ctx, stderr); err != nil {
		_ = t.shutdown(context.WithoutCancel(ctx))
		return nil, err
	}

	if addr == "" {
		return t, nil
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil && optional {
		fmt.Fprintf(stderr, "order-worker: metrics off: %v (set -metrics-addr to choose another address)\n", err)
		return t, nil
	}
	if err != nil {
		_ = t.shutdown(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("-metrics-addr %s: %w", addr, err)
	}
	t.addr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if t.draining.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "draining\n")
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ok\n")
	})
	t.server = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	t.served = make(chan error, 1)
	go func() { t.served <- t.server.Serve(ln) }()
	fmt.Fprintf(stderr, "order-worker: metrics on http://%s/metrics\n", t.addr)
	return t, nil
}

func (t *telemetry) startTracing(ctx context.Context, stderr io.Writer) error {
	var opts []sdktrace.TracerProviderOption
	if os.Getenv(envTraceStdout) == "1" {
		// Never stdout: that is the summary line's alone.
		var w io.Writer = stderr
		if path := os.Getenv(envTraceFile); path != "" {
			f, err := os.Create(path)
			if err != nil {
				return fmt.Errorf("%s: %w", envTraceFile, err)
			}
			w, t.closer = f, f
		}
		exp, err := stdouttrace.New(stdouttrace.WithWriter(w))
		if err != nil {
			return fmt.Errorf("stdout trace exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	if os.Getenv(envOTLP) != "" {
		// The exporter reads the endpoint, headers and the rest from the
		// standard OTEL_EXPORTER_OTLP_* variables.
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return fmt.Errorf("OTLP trace exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	if len(opts) > 0 {
		t.tracer = sdktrace.NewTracerProvider(opts...)
	}
	return nil
}

// meterProvider is what the consumer, the store and the source report to.
func (t *telemetry) meterProvider() metric.MeterProvider { return t.meters }

func (t *telemetry) tracerProvider() trace.TracerProvider {
	if t.tracer == nil {
		return tracenoop.NewTracerProvider()
	}
	return t.tracer
}

// shutdown stops serving, then flushes and stops the providers, within
// ctx (bounded here so an unreachable collector cannot hold the exit).
func (t *telemetry) shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var errs []error
	if t.server != nil {
		errs = append(errs, t.server.Shutdown(ctx))
		if err := <-t.served; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	if t.tracer != nil {
		errs = append(errs, t.tracer.Shutdown(ctx))
	}
	errs = append(errs, t.meters.Shutdown(ctx))
	if t.closer != nil {
		errs = append(errs, t.closer.Close())
	}
	return errors.Join(errs...)
}
