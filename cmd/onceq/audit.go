package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/onceq/onceq/dedup/dynamostore/audit"
)

func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("onceq audit", stderr,
		"usage: onceq audit -table NAME -archive NAME [-retention 720h] [-from-start] [-metrics-addr ADDR]",
		"Reads the idempotency table's stream until interrupted: archives a tombstone for each COMPLETED record",
		"TTL removed (what a store with WithArchive consults), and logs doubled completions (a key completed by two owners).",
		"The table needs its stream (onceq create-table -stream) and the archive table (-archive there), checked at start.",
		"Its position is kept in the archive table: a restart resumes where the last reader stopped, and only a stream",
		"never read before starts from now (or from its oldest record with -from-start).",
		"Endpoint, region and credentials come from the AWS SDK's standard settings (AWS_ENDPOINT_URL_DYNAMODB_STREAMS for the stream).",
	)
	table := fs.String("table", "", "idempotency table (required)")
	archive := fs.String("archive", "", "archive table for tombstones (required)")
	retention := fs.Duration("retention", 30*24*time.Hour, "how long a tombstone is kept: the window for recognising a late duplicate")
	fromStart := fs.Bool("from-start", false, "on a stream never read before, read from its oldest record (up to 24 h back) instead of from now")
	anyDelete := fs.Bool("any-delete", false, "treat every delete as TTL's (DynamoDB Local, whose TTL deletes carry no identity; deletes by hand in tests)")
	poll := fs.Duration("poll", time.Second, "wait between reads of a stream read to its end")
	metricsAddr := fs.String("metrics-addr", "", "serve the trail's metrics (TTL lag, tombstones, doubled completions) for Prometheus on this address, at /metrics")
	if err := fs.Parse(args); err != nil {
		return usageExit(err)
	}
	switch {
	case *table == "" || *archive == "":
		fmt.Fprintln(stderr, "onceq audit: -table and -archive are required")
		return 2
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "onceq audit: unexpected argument %q\n", fs.Arg(0))
		return 2
	case *retention <= 0 || *poll <= 0:
		fmt.Fprintln(stderr, "onceq audit: -retention and -poll must be positive")
		return 2
	}
	db, err := dynamoClient(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "onceq audit: %s\n", field(err.Error()))
		return 1
	}
	streams, err := streamsClient(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "onceq audit: %s\n", field(err.Error()))
		return 1
	}
	var meters *sdkmetric.MeterProvider
	if *metricsAddr != "" {
		stopMetrics, mp, err := serveMetrics(ctx, *metricsAddr, stdout)
		if err != nil {
			fmt.Fprintf(stderr, "onceq audit: %s\n", field(err.Error()))
			return 1
		}
		defer stopMetrics()
		meters = mp
	}
	opts := []audit.Option{
		audit.ArchiveRetention(*retention), audit.PollInterval(*poll),
		audit.WithLogger(slog.New(slog.NewTextHandler(stderr, nil))),
	}
	if *anyDelete {
		opts = append(opts, audit.AnyDeleteIsTTL())
	}
	if *fromStart {
		opts = append(opts, audit.FromStreamStart())
	}
	if meters != nil {
		opts = append(opts, audit.WithMeterProvider(meters))
	}
	a, err := audit.New(db, streams, *table, *archive, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "onceq audit: %s\n", field(err.Error()))
		return 2
	}
	fmt.Fprintf(stdout, "auditing the stream of %s into %s (tombstones kept %v); interrupt to stop\n", field(*table), field(*archive), *retention)
	if err := a.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "onceq audit: %s\n", field(err.Error()))
		return 1
	}
	return 0
}

// serveMetrics serves a meter provider's metrics for Prometheus on addr
// until stop, which also waits for the server's goroutine.
func serveMetrics(ctx context.Context, addr string, stdout io.Writer) (stop func(), mp *sdkmetric.MeterProvider, err error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("-metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln) // ErrServerClosed at stop
	}()
	fmt.Fprintf(stdout, "metrics on http://%s/metrics\n", ln.Addr())
	return func() {
		_ = srv.Close()
		<-served
		_ = mp.Shutdown(context.WithoutCancel(ctx))
	}, mp, nil
}
