package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrape GETs url and returns the status and body.
func scrape(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// sample is the value of the Prometheus sample of name whose labels
// include every label="value" of labels; -1 when there is none.
func sample(body, name string, labels ...string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{([^}]*)\} (\S+)$`)
	total, found := 0.0, false
lines:
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		for _, l := range labels {
			if !strings.Contains(m[1], l) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			continue
		}
		total, found = total+v, true
	}
	if !found {
		return -1
	}
	return total
}

// The demo serves /metrics with the consumer's counters by outcome, and
// /healthz; the summary line stays alone on stdout.
func TestMetricsEndpoint(t *testing.T) {
	opts, err := parseFlags([]string{"-demo", "500", "-progress", "1h", "-metrics-addr", "127.0.0.1:0"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var metrics, health string
	healthStatus := 0
	opts.beforeExit = func(addr string) {
		if addr == "" {
			t.Error("no metrics address reported")
			return
		}
		_, metrics = scrape(t, "http://"+addr+"/metrics")
		healthStatus, health = scrape(t, "http://"+addr+"/healthz")
	}
	var out, errOut bytes.Buffer
	if err := work(t.Context(), opts, &out, &errOut); err != nil {
		t.Fatalf("work: %v\n%s", err, errOut.String())
	}
	// Scraped after the drain began: the worker says it is going away.
	if healthStatus != http.StatusServiceUnavailable || health != "draining\n" {
		t.Errorf("/healthz after shutdown began: %d %q, want 503 draining", healthStatus, health)
	}
	// 500 deliveries: 4 malformed, every fifth of the rest a duplicate.
	// The orders queue's; the shipping worker's are apart.
	for _, c := range []struct {
		outcome string
		want    float64
	}{{"processed", 500 - 4 - 99 - 10}, {"duplicate", 99}, {"rejected", 10}, {"dead_lettered", 4}} {
		if got := sample(metrics, "onceq_messages_total", `onceq_outcome="`+c.outcome+`"`, `messaging_destination_name="orders"`); got != c.want {
			t.Errorf("onceq_messages_total{onceq_outcome=%q} = %v, want %v", c.outcome, got, c.want)
		}
	}
	// The second stage: each reserved order's event shipped once.
	if got := sample(metrics, "onceq_messages_total", `onceq_outcome="processed"`, `messaging_destination_name="shipping"`); got != 500-4-99-10 {
		t.Errorf("shipping worker processed %v, want %v", got, 500-4-99-10)
	}
	if got := sample(metrics, "onceq_outbox_sends_total", `onceq_result="dispatched"`); got != 500-4-99-10 {
		t.Errorf("onceq_outbox_sends_total{onceq_result=\"dispatched\"} = %v, want %v", got, 500-4-99-10)
	}
	if !strings.Contains(metrics, "onceq_store_calls_total") {
		t.Error("no onceq_store_calls_total in /metrics")
	}
	if lines := strings.Count(strings.TrimSpace(out.String()), "\n"); lines != 0 || !strings.HasPrefix(out.String(), "{") {
		t.Errorf("stdout is not one JSON line: %q", out.String())
	}
	if !strings.Contains(errOut.String(), "metrics on http://127.0.0.1:") {
		t.Errorf("no metrics address on stderr: %s", errOut.String())
	}
}

// An empty -metrics-addr serves nothing.
func TestMetricsDisabled(t *testing.T) {
	opts, err := parseFlags([]string{"-demo", "200", "-progress", "1h", "-metrics-addr", ""}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	got := "unset"
	opts.beforeExit = func(addr string) { got = addr }
	var out, errOut bytes.Buffer
	if err := work(t.Context(), opts, &out, &errOut); err != nil {
		t.Fatalf("work: %v\n%s", err, errOut.String())
	}
	if got != "" || strings.Contains(errOut.String(), "metrics on") {
		t.Fatalf("metrics served at %q with -metrics-addr empty", got)
	}
}

// /healthz is 200 while running and 503 "draining" once shutdown began.
func TestHealthzDraining(t *testing.T) {
	tel, err := startTelemetry(t.Context(), "127.0.0.1:0", false, io.Discard, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.shutdown(context.Background()) }()
	if code, body := scrape(t, "http://"+tel.addr+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("running: %d %q", code, body)
	}
	tel.draining.Store(true)
	if code, body := scrape(t, "http://"+tel.addr+"/healthz"); code != http.StatusServiceUnavailable || body != "draining\n" {
		t.Fatalf("draining: %d %q", code, body)
	}
}

// A busy default metrics port does not stop the demo (make run); a busy
// address the user asked for is an error.
func TestBusyMetricsPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	opts, err := parseFlags([]string{"-demo", "200", "-progress", "1h"}, &bytes.Buffer{})
	if err != nil || opts.metricsAddrSet {
		t.Fatalf("default -metrics-addr counted as set (%v)", err)
	}
	opts.metricsAddr = ln.Addr().String() // the default, but busy
	var out, errOut bytes.Buffer
	if err := work(t.Context(), opts, &out, &errOut); err != nil || !strings.Contains(errOut.String(), "metrics off") || !strings.HasPrefix(out.String(), "{") {
		t.Fatalf("busy default port: %v; stderr %q; stdout %q", err, errOut.String(), out.String())
	}
	opts, _ = parseFlags([]string{"-demo", "200", "-progress", "1h", "-metrics-addr", ln.Addr().String()}, &bytes.Buffer{})
	if err := work(t.Context(), opts, &out, &errOut); err == nil {
		t.Fatal("a busy -metrics-addr given on the command line was not an error")
	}
	t.Setenv("ORDER_WORKER_METRICS_ADDR", ln.Addr().String())
	if opts, _ = parseFlags(nil, &bytes.Buffer{}); !opts.metricsAddrSet {
		t.Fatal("-metrics-addr from the environment not counted as set")
	}
}

// TestMetricsDefaultLoopback: by default metrics are served on loopback
// only; another interface takes an address given on purpose.
func TestMetricsDefaultLoopback(t *testing.T) {
	opts, err := parseFlags([]string{"-demo", "1"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(opts.metricsAddr)
	if err != nil {
		t.Fatalf("default -metrics-addr %q: %v", opts.metricsAddr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		t.Errorf("default -metrics-addr %q listens beyond loopback", opts.metricsAddr)
	}
}
