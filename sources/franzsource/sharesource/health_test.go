package sharesource_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource/sharesource"
)

// brokerBound is the BrokerTimeout of the health test, short to keep it
// short; notReadyWithin is the bound it holds the consumer to: the bound,
// and the time a client takes to give up on a request the broker does not
// answer.
const (
	brokerBound    = 5 * time.Second
	notReadyWithin = brokerBound + 25*time.Second
)

// A paused broker turns the consumer over a share-group source not ready
// within the bound, with the broker's address in the probe's body and in
// a log line; once the broker answers and records flow, the consumer is
// ready again.
func TestBrokerPausedTurnsReadiness(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	w := producer(t, addr, topic)
	ctx := testenv.Context(t, 2*time.Minute)
	produce := func(body string) {
		t.Helper()
		if err := w.ProduceSync(ctx, &kgo.Record{Value: []byte(body)}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	// Every connection of the source goes through the proxy, which the
	// test pauses: the broker, as the source sees it, stops answering.
	proxy := faultproxy.NewTCP(t, addr)
	src := newSource(t, addr, group, topic, sharesource.WithDialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, proxy.Addr())
	}))
	hw := startHealthWorker(t, src)
	produce("m1")
	hw.await(ctx, t, "m1")
	testenv.Eventually(t, 10*time.Second, "ready once m1 was handled", func() bool { return hw.c.Health().Ready })

	proxy.Pause()
	t.Cleanup(proxy.Resume) // before the worker's stop, which runs first
	took, _ := hw.notReady(t, addr, "ShareFetch")
	t.Logf("broker paused: not ready after %v", took.Round(100*time.Millisecond))

	proxy.Resume()
	produce("m2")
	hw.await(ctx, t, "m2")
	testenv.Eventually(t, 30*time.Second, "ready again once records flow", func() bool { return hw.c.Health().Ready })
}

// A broker that answers the share group's fetches with an error turns
// the consumer not ready within the bound, the error and the broker's
// address in the probe's body and in a log line; once its fetches answer
// again and records flow, the consumer is ready again.
func TestFetchErrorsTurnReadiness(t *testing.T) {
	t.Parallel()
	// Once the errors stop, readiness comes back when records flow, and
	// on an idle topic too: a poll returns only with records or errors,
	// so an idle topic would otherwise keep the failure open.
	for _, then := range []string{"records flow", "idle topic"} {
		t.Run(then, func(t *testing.T) {
			t.Parallel()
			fetchErrorsThen(t, then == "records flow")
		})
	}
}

func fetchErrorsThen(t *testing.T, flow bool) {
	k := newCluster(t)
	addr := k.ListenAddrs()[0]
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	w := producer(t, addr, topic)
	ctx := testenv.Context(t, 2*time.Minute)
	produce := func(body string) {
		t.Helper()
		if err := w.ProduceSync(ctx, &kgo.Record{Value: []byte(body)}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	// The broker answers every fetch, while failing is set, with an error
	// on each partition the group's fetches named (a share session names
	// them once, in its first fetch).
	var (
		failing atomic.Bool
		mu      sync.Mutex
		parts   = map[[16]byte][]int32{}
	)
	k.ControlKey(kmsg.ShareFetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.KeepControl()
		r := req.(*kmsg.ShareFetchRequest)
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				if !slices.Contains(parts[rt.TopicID], rp.Partition) {
					parts[rt.TopicID] = append(parts[rt.TopicID], rp.Partition)
				}
			}
		}
		if !failing.Load() {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.ShareFetchResponse)
		for id, ps := range parts {
			rt := kmsg.NewShareFetchResponseTopic()
			rt.TopicID = id
			for _, p := range ps {
				rp := kmsg.NewShareFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, kerr.TopicAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	hw := startHealthWorker(t, newSource(t, addr, group, topic))
	produce("m1")
	hw.await(ctx, t, "m1")
	testenv.Eventually(t, 10*time.Second, "ready once m1 was handled", func() bool { return hw.c.Health().Ready })

	failing.Store(true)
	took, body := hw.notReady(t, addr, "a fetch without errors")
	if !strings.Contains(body, kerr.TopicAuthorizationFailed.Message) {
		t.Fatalf("readyz body %s: want the fetch's error", body)
	}
	t.Logf("fetches failing: not ready after %v", took.Round(100*time.Millisecond))

	failing.Store(false)
	if flow {
		produce("m2")
		hw.await(ctx, t, "m2")
	}
	testenv.Eventually(t, 30*time.Second, "ready again once the fetches succeed", func() bool { return hw.c.Health().Ready })
}

// healthWorker is a consumer run over a share-group source in a health
// test.
type healthWorker struct {
	c       *consumer.Consumer
	logs    *testenv.LogBuffer
	handled chan string
}

func startHealthWorker(t *testing.T, src *sharesource.Source) *healthWorker {
	t.Helper()
	w := &healthWorker{logs: &testenv.LogBuffer{}, handled: make(chan string, 16)}
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		w.handled <- string(m.Body)
		return consumer.Result{}, nil
	})
	c, err := consumer.New(src, memstoretest.New(t), h, consumer.BrokerTimeout(brokerBound), consumer.WithoutDeadLetters(),
		consumer.WithLogger(w.logs.Logger(-4)))
	if err != nil {
		t.Fatal(err)
	}
	w.c = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("consumer log:\n%s", w.logs.String())
		}
	})
	return w
}

func (w *healthWorker) await(ctx context.Context, t *testing.T, body string) {
	t.Helper()
	select {
	case got := <-w.handled:
		if got != body {
			t.Fatalf("handled %q, want %q", got, body)
		}
	case <-ctx.Done():
		t.Fatalf("%q not handled", body)
	}
}

// notReady waits, within notReadyWithin, for the consumer to be not
// ready for the broker at addr failing what it waits for, and for a log
// line naming that broker; it returns how long the consumer took to be
// not ready, and the readiness probe's body.
func (w *healthWorker) notReady(t *testing.T, addr, waiting string) (time.Duration, string) {
	t.Helper()
	start := time.Now()
	testenv.Eventually(t, notReadyWithin, "not ready with the broker failing", func() bool { return !w.c.Health().Ready })
	rec := httptest.NewRecorder()
	w.c.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	took := time.Since(start)
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"broker_reachable":false`) ||
		!strings.Contains(string(body), addr) || !strings.Contains(string(body), waiting) {
		t.Fatalf("readyz %d %s: want 503, the broker %s unreachable, waiting for %q", rec.Code, body, addr, waiting)
	}
	testenv.Eventually(t, 30*time.Second, "a line waiting for the broker", func() bool {
		return strings.Contains(w.logs.String(), "waiting for the broker")
	})
	if line := lineWith(w.logs.String(), "waiting for the broker"); !strings.Contains(line, addr) {
		t.Fatalf("line %q: want the broker's address %s", line, addr)
	}
	return took, string(body)
}

// lineWith is the first line of log that holds s.
func lineWith(log, s string) string {
	for line := range strings.Lines(log) {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
