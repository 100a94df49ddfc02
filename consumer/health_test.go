package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/memsource"
)

// probe GETs url and returns the status and the Health in the body.
func probe(t *testing.T, method, url string) (int, consumer.Health) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h consumer.Health
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusServiceUnavailable {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("%s: Content-Type %q, want application/json", url, ct)
		}
		if method == http.MethodGet {
			if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
				t.Fatalf("%s: body: %v", url, err)
			}
		}
	}
	return resp.StatusCode, h
}

// The health endpoints, served by a real HTTP server: not ready before Run
// and until the source answers, ready while receiving with the store
// reachable; live until Run has returned; a JSON body that says why.
func TestHealthEndpoints(t *testing.T) {
	q := memsourcetest.NewQueue(t, "orders")
	logs := newLogRecorder()
	c, err := consumer.New(q.Source(), memstoretest.New(t), noopHandler(), consumer.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/healthz/", c.HealthHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ready, live := srv.URL+"/healthz/readyz", srv.URL+"/healthz/livez"

	if code, h := probe(t, http.MethodGet, ready); code != http.StatusServiceUnavailable || h.Ready || h.State != "new" || len(h.Reasons) == 0 {
		t.Fatalf("readyz before Run: %d %+v, want 503, state new, a reason", code, h)
	}
	if code, h := probe(t, http.MethodGet, live); code != http.StatusOK || !h.Live {
		t.Fatalf("livez before Run: %d %+v, want 200", code, h)
	}

	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")})
	logs.await("receiving from the source")
	code, h := probe(t, http.MethodGet, ready)
	if code != http.StatusOK || !h.Ready || !h.Live || h.State != "receiving" || !h.StoreReachable || h.Stalled || len(h.Reasons) != 0 {
		t.Fatalf("readyz while receiving: %d %+v, want 200, ready, live, receiving", code, h)
	}
	if code, _ := probe(t, http.MethodHead, ready); code != http.StatusOK {
		t.Fatalf("HEAD readyz: %d, want 200", code)
	}
	if code, _ := probe(t, http.MethodPost, ready); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST readyz: %d, want 405", code)
	}
	if code, _ := probe(t, http.MethodGet, srv.URL+"/healthz/other"); code != http.StatusNotFound {
		t.Fatalf("another path: %d, want 404", code)
	}

	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if code, h := probe(t, http.MethodGet, live); code != http.StatusServiceUnavailable || h.Live || h.State != "stopped" {
		t.Fatalf("livez after Run returned: %d %+v, want 503, stopped", code, h)
	}
	if code, _ := probe(t, http.MethodGet, ready); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz after Run returned: %d, want 503", code)
	}
}

// A handler that never returns, the only one running, stalls the consumer
// once StallTimeout passes with no message finished: not live (503 on
// livez), and live again once a message finishes.
func TestStalledIsNotLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")})
		release := make(chan struct{})
		h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
			<-release // ignores its context
			return consumer.Result{}, nil
		})
		c, err := consumer.New(q.Source(), memstoretest.New(t), h, consumer.Concurrency(1),
			consumer.StallTimeout(3*time.Minute), consumer.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		stop := runInBubble(t, c)
		livez := func() (int, consumer.Health) {
			rec := httptest.NewRecorder()
			c.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/livez", nil))
			var got consumer.Health
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			return rec.Code, got
		}
		time.Sleep(3*time.Minute - time.Second)
		synctest.Wait()
		// In flight: the message, and its copy redelivered once its
		// delivery was no longer extended, queued behind the only worker.
		if code, h := livez(); code != http.StatusOK || h.Stalled || h.Running != 1 || h.InFlight < 1 {
			t.Fatalf("just inside StallTimeout: %d %+v, want live, one running", code, h)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		code, got := livez()
		if code != http.StatusServiceUnavailable || !got.Stalled || got.Live || !got.Ready {
			t.Fatalf("past StallTimeout: %d %+v, want 503, stalled, still ready", code, got)
		}
		if !strings.Contains(strings.Join(got.Reasons, ";"), "stalled") {
			t.Fatalf("reasons %q do not say stalled", got.Reasons)
		}
		close(release)
		synctest.Wait()
		if code, h := livez(); code != http.StatusOK || h.Stalled || h.Running != 0 {
			t.Fatalf("once the handler returned: %d %+v, want live", code, h)
		}
		stop()
	})
}

// Messages waiting for a store that is out are not a stall: store calls
// fail within their timeout, so messages keep finishing.
func TestOutageIsNotAStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")})
		c, err := consumer.New(q.Source(), outageStore(t, 1<<30), noopHandler(), consumer.StallTimeout(time.Minute), consumer.LeaseTTL(time.Minute),
			consumer.HandlerTimeout(30*time.Second), consumer.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		stop := runInBubble(t, c)
		time.Sleep(30 * time.Minute)
		synctest.Wait()
		if h := c.Health(); !h.Live || h.Stalled || h.Ready || h.StoreReachable {
			t.Fatalf("health through a 30-minute outage %+v: want live, not ready, the store unreachable", h)
		}
		stop()
	})
}

// A StallTimeout shorter than LeaseTTL is refused: a message that runs
// its full course would count as a stall.
func TestStallTimeoutShorterThanLeaseRefused(t *testing.T) {
	q := memsourcetest.NewQueue(t, "orders")
	_, err := consumer.New(q.Source(), memstoretest.New(t), noopHandler(), consumer.StallTimeout(time.Second))
	if !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), "StallTimeout") {
		t.Fatalf("StallTimeout 1s: %v, want ErrInvalidConfig naming StallTimeout", err)
	}
}

// flakySource fails Receive while failing is set, as a broker that cannot
// be reached.
type flakySource struct {
	consumer.Source
	failing atomic.Bool
}

func (s *flakySource) Receive(ctx context.Context, max int) ([]*consumer.Message, error) {
	if s.failing.Load() {
		return nil, errors.New("dial tcp: connection refused")
	}
	return s.Source.Receive(ctx, max)
}

// A source whose Receive fails makes the consumer not ready, saying
// since when; ready again once a Receive returns.
func TestFailingSourceNotReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		src := &flakySource{Source: q.Source()}
		c, err := consumer.New(src, memstoretest.New(t), noopHandler(), consumer.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("first")})
		stop := runInBubble(t, c)
		synctest.Wait()
		if h := c.Health(); !h.Ready {
			t.Fatalf("health while receiving %+v, want ready", h)
		}
		src.failing.Store(true)
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("second")})
		time.Sleep(time.Minute)
		synctest.Wait()
		h := c.Health()
		if h.Ready || !h.Live || h.SourceFailingSince.IsZero() || !strings.Contains(strings.Join(h.Reasons, ";"), "Receive failing") {
			t.Fatalf("health while Receive fails %+v: want not ready, live, failing since, a reason", h)
		}
		// Retried every 5s at most; the Receive retried blocks until a
		// message comes, and only a Receive that returns says the source
		// is back.
		src.failing.Store(false)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if h := c.Health(); h.Ready {
			t.Fatalf("health with a Receive under way after failures %+v, want not ready until one returns", h)
		}
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("third")})
		synctest.Wait()
		if h := c.Health(); !h.Ready || !h.SourceFailingSince.IsZero() {
			t.Fatalf("health once Receive returns %+v, want ready", h)
		}
		stop()
	})
}
