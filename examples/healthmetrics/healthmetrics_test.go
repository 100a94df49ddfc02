package healthmetrics_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/examples/healthmetrics"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/memsource"
)

// settled signals each message's settle on the source.
type settled chan struct{}

func (s settled) OnMessageSettled(context.Context, *consumer.Message, consumer.Action, error) {
	select {
	case s <- struct{}{}:
	default:
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// A worker wired as the docs show serves onceq's metrics in Prometheus's
// format and its health endpoints.
func TestMetricsAndHealthServed(t *testing.T) {
	mp, metrics, err := healthmetrics.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()
	q := memsourcetest.NewQueue(t, "orders")
	_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")})
	done := make(settled, 1)
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	c, err := consumer.New(q.Source(), memstoretest.New(t), h, consumer.WithMeterProvider(mp), consumer.WithHooks(done),
		consumer.WithProgressLog(time.Minute), consumer.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(healthmetrics.Mux(c, metrics))
	defer srv.Close()

	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	<-done
	code, body := get(t, srv.URL+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, "onceq_messages_total{") || !strings.Contains(body, `onceq_outcome="processed"`) {
		t.Fatalf("/metrics: %d, want onceq_messages_total with a processed outcome:\n%s", code, body)
	}
	if code, body := get(t, srv.URL+"/healthz/readyz"); code != http.StatusOK || !strings.Contains(body, `"ready":true`) {
		t.Fatalf("/healthz/readyz: %d %s, want 200, ready", code, body)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, srv.URL+"/healthz/livez"); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz/livez after Run returned: %d, want 503", code)
	}
}
