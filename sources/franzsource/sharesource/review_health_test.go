package sharesource_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// pausedCluster is a share-group kfake cluster whose broker holds every
// request unanswered while paused, as a broker that hangs does.
type pausedCluster struct {
	*kfake.Cluster
	addr   string
	paused atomic.Bool
	mu     sync.Mutex
	resume chan struct{}
}

func newPausedCluster(t *testing.T) *pausedCluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": "4000",
		"share.record.lock.sweep.interval.ms": "100",
		"group.share.delivery.count.limit":    "10",
		"group.share.heartbeat.interval.ms":   "200",
	}))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	p := &pausedCluster{Cluster: c, addr: c.ListenAddrs()[0], resume: make(chan struct{})}
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if p.paused.Load() {
			p.mu.Lock()
			resume := p.resume
			p.mu.Unlock()
			c.SleepControl(func() { <-resume })
		}
		return nil, nil, false
	})
	t.Cleanup(func() { p.Resume(); c.Close() })
	return p
}

func (p *pausedCluster) Pause() {
	p.mu.Lock()
	p.resume = make(chan struct{})
	p.mu.Unlock()
	p.paused.Store(true)
}

func (p *pausedCluster) Resume() {
	if p.paused.Swap(false) {
		p.mu.Lock()
		close(p.resume)
		p.mu.Unlock()
	}
}

// readyz is the consumer's readiness probe: its status and body.
func readyz(c *consumer.Consumer) (int, string) {
	rec := httptest.NewRecorder()
	c.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}

// A share-group consumer whose broker hangs turns not ready within
// BrokerTimeout and the client's request timeout, naming the broker in
// the probe's body and in a log line, and is ready again once records
// flow; a stop while the broker hangs is prompt.
func TestReviewSharePausedBrokerTurnsReadiness(t *testing.T) {
	const (
		bound          = 5 * time.Second
		notReadyWithin = bound + 25*time.Second
	)
	k := newPausedCluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, k.addr, topic, 1)
	prod := producer(t, k.addr, topic)
	ctx := testenv.Context(t, 2*time.Minute)
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("m1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	src := newSource(t, k.addr, group, topic)
	logs := &testenv.LogBuffer{}
	handled := make(chan string, 16)
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		handled <- string(m.Body)
		return consumer.Result{}, nil
	})
	c, err := consumer.New(src, memstoretest.New(t), h, consumer.WithoutDeadLetters(),
		consumer.BrokerTimeout(bound), consumer.WithLogger(logs.Logger(-4)))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			<-done
		}
		if t.Failed() {
			t.Logf("consumer log:\n%s", logs.String())
		}
	})
	await := func(body string) {
		t.Helper()
		select {
		case got := <-handled:
			if got != body {
				t.Fatalf("handled %q, want %q", got, body)
			}
		case <-ctx.Done():
			t.Fatalf("%q not handled", body)
		}
	}
	await("m1")
	testenv.Eventually(t, 10*time.Second, "ready after the first record", func() bool { return c.Health().Ready })

	k.Pause()
	start := time.Now()
	testenv.Eventually(t, notReadyWithin, "not ready with the broker paused", func() bool { return !c.Health().Ready })
	t.Logf("broker paused: not ready after %v", time.Since(start).Round(100*time.Millisecond))
	code, body := readyz(c)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, k.addr) {
		t.Fatalf("readyz %d %s: want 503 naming the broker %s", code, body, k.addr)
	}
	testenv.Eventually(t, 30*time.Second, "a log line waiting for the broker", func() bool {
		return strings.Contains(logs.String(), "waiting for the broker")
	})
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "waiting for the broker") && !strings.Contains(line, k.addr) {
			t.Fatalf("line %q: want the broker's address %s", line, k.addr)
		}
	}

	k.Resume()
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("m2")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	await("m2")
	testenv.Eventually(t, 30*time.Second, "ready again once records flow", func() bool { return c.Health().Ready })

	k.Pause()
	testenv.Eventually(t, notReadyWithin, "not ready with the broker paused again", func() bool { return !c.Health().Ready })
	stopAt := time.Now()
	cancel()
	stopped = true
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of its cancel")
	}
	if took := time.Since(stopAt); took > 10*time.Second {
		t.Fatalf("stop took %v with the broker paused, want at most 10s", took)
	}
	k.Resume()
}
