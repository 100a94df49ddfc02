package kafkaboth_test

import (
	"context"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
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
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// pausable is a kfake cluster whose broker a test can pause: every
// request it gets is held unanswered, as by a broker that hangs or a
// network that drops its packets, until Resume.
type pausable struct {
	*kfake.Cluster
	addr   string
	paused atomic.Bool
	mu     sync.Mutex
	resume chan struct{}
}

func newPausable(t *testing.T) *pausable {
	t.Helper()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	p := &pausable{Cluster: c, addr: c.ListenAddrs()[0], resume: make(chan struct{})}
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

func (p *pausable) Pause() {
	p.mu.Lock()
	p.resume = make(chan struct{})
	p.mu.Unlock()
	p.paused.Store(true)
}

func (p *pausable) Resume() {
	if p.paused.Swap(false) {
		p.mu.Lock()
		close(p.resume)
		p.mu.Unlock()
	}
}

// healthOpeners open each Kafka source for the health tests.
var healthOpeners = map[string]func(t *testing.T, addr, group, topic string) consumer.Source{
	"kafka-go": func(t *testing.T, addr, group, topic string) consumer.Source {
		return newKafkaSource(t, addr, group, topic)
	},
	"franz-go": func(t *testing.T, addr, group, topic string) consumer.Source {
		return newFranzSource(t, addr, group, topic)
	},
}

// brokerBound is the BrokerTimeout of the health tests, short to keep
// them short; notReadyWithin is the bound they hold the consumer to: the
// bound, and the time a client takes to give up on a request the broker
// does not answer.
const (
	brokerBound    = 5 * time.Second
	notReadyWithin = brokerBound + 25*time.Second
	stopWithin     = 10 * time.Second
)

// worker is a consumer run over a Kafka source in a health test.
type worker struct {
	c       *consumer.Consumer
	logs    *testenv.LogBuffer
	handled chan string
	cancel  context.CancelFunc
	done    chan error
}

func startWorker(t *testing.T, src consumer.Source) *worker {
	t.Helper()
	w := &worker{logs: &testenv.LogBuffer{}, handled: make(chan string, 16), done: make(chan error, 1)}
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
	w.cancel = cancel
	go func() { w.done <- c.Run(ctx) }()
	t.Cleanup(func() {
		if w.cancel != nil {
			w.stop(t)
		}
		if t.Failed() {
			t.Logf("consumer log:\n%s", w.logs.String())
		}
	})
	return w
}

// stop cancels Run (a SIGTERM) and returns how long Run took to return.
func (w *worker) stop(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	w.cancel()
	w.cancel = nil
	select {
	case err := <-w.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60s of its cancel")
	}
	return time.Since(start)
}

func (w *worker) await(t *testing.T, body string) {
	t.Helper()
	select {
	case got := <-w.handled:
		if got != body {
			t.Fatalf("handled %q, want %q", got, body)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%q not handled within 30s", body)
	}
}

// until waits up to limit for the consumer's readiness to be ready and
// returns how long that took, with the probe's body.
func (w *worker) until(t *testing.T, ready bool, limit time.Duration) (time.Duration, string) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < limit {
		if w.c.Health().Ready == ready {
			rec := httptest.NewRecorder()
			w.c.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			body, _ := io.ReadAll(rec.Body)
			return time.Since(start), string(body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("readiness not %v within %v: %+v", ready, limit, w.c.Health())
	return 0, ""
}

// A paused broker turns the consumer not ready within the bound, the
// broker's address in the probe's body, and a log line names it; once the
// broker answers and records flow the consumer is ready again; and a stop
// while the broker is paused is prompt.
func TestBrokerPausedTurnsReadiness(t *testing.T) {
	t.Parallel()
	for name, open := range healthOpeners {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := newPausable(t)
			topic, group := topicName(t, "in"), topicName(t, "group")
			createTopic(t, k.addr, topic, 1)
			cl := client(t, k.addr, kgo.DefaultProduceTopic(topic))
			produce(t, cl, &kgo.Record{Value: []byte("m1")})
			src := open(t, k.addr, group, topic)
			w := startWorker(t, src)
			w.await(t, "m1")
			w.until(t, true, 10*time.Second)

			k.Pause()
			took, body := w.until(t, false, notReadyWithin)
			if !strings.Contains(body, k.addr) {
				t.Fatalf("readyz body %s: want the broker's address %s", body, k.addr)
			}
			t.Logf("broker paused: not ready after %v: %s", took.Round(100*time.Millisecond), strings.TrimSpace(body))
			testenv.Eventually(t, 30*time.Second, "a line waiting for the broker, after not ready", func() bool {
				return strings.Contains(w.logs.String(), "waiting for the broker")
			})
			if line := lineWith(w.logs.String(), "waiting for the broker"); !strings.Contains(line, k.addr) {
				t.Fatalf("line %q: want the broker's address %s", line, k.addr)
			}

			k.Resume()
			produce(t, cl, &kgo.Record{Value: []byte("m2")})
			w.await(t, "m2")
			back, _ := w.until(t, true, 30*time.Second)
			t.Logf("broker resumed: ready again %v after m2 was handled", back.Round(100*time.Millisecond))

			k.Pause()
			w.until(t, false, notReadyWithin)
			if took := w.stop(t); took > stopWithin {
				t.Fatalf("stop took %v with the broker paused, want at most %v", took, stopWithin)
			} else {
				t.Logf("broker paused: stopped in %v", took.Round(100*time.Millisecond))
			}
			// What the stop left to finish in the background ends once the
			// broker answers.
			k.Resume()
			if err := src.Close(testenv.Context(t, 30*time.Second)); err != nil {
				t.Logf("source close after the broker resumed: %v", err)
			}
		})
	}
}

// A broker that is gone turns the consumer not ready within the bound,
// naming it; a stop then is prompt.
func TestBrokerKilledTurnsReadiness(t *testing.T) {
	t.Parallel()
	for name, open := range healthOpeners {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := newPausable(t)
			topic, group := topicName(t, "in"), topicName(t, "group")
			createTopic(t, k.addr, topic, 1)
			produce(t, client(t, k.addr, kgo.DefaultProduceTopic(topic)), &kgo.Record{Value: []byte("m1")})
			src := open(t, k.addr, group, topic)
			w := startWorker(t, src)
			w.await(t, "m1")
			w.until(t, true, 10*time.Second)

			k.Close()
			took, body := w.until(t, false, notReadyWithin)
			if !strings.Contains(body, k.addr) {
				t.Fatalf("readyz body %s: want the broker's address %s", body, k.addr)
			}
			t.Logf("broker killed: not ready after %v: %s", took.Round(100*time.Millisecond), strings.TrimSpace(body))
			if took := w.stop(t); took > stopWithin {
				t.Fatalf("stop took %v with the broker gone, want at most %v", took, stopWithin)
			} else {
				t.Logf("broker killed: stopped in %v", took.Round(100*time.Millisecond))
			}
			if err := src.Close(testenv.Context(t, 30*time.Second)); err != nil {
				t.Logf("source close with the broker gone: %v", err)
			}
		})
	}
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

// A stop while the group join is under way (the broker holding its
// answer) is prompt for either source.
func TestStopDuringGroupJoinIsPrompt(t *testing.T) {
	t.Parallel()
	for name, open := range healthOpeners {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := newPausable(t)
			topic, group := topicName(t, "in"), topicName(t, "group")
			createTopic(t, k.addr, topic, 1)
			produce(t, client(t, k.addr, kgo.DefaultProduceTopic(topic)), &kgo.Record{Value: []byte("m1")})
			src := open(t, k.addr, group, topic)
			w := startWorker(t, src)
			w.await(t, "m1")
			// A second member joins: the group rebalances, and the broker
			// holds every join, the first member's rejoin too, until the
			// stop is over.
			joining, release := make(chan struct{}), make(chan struct{})
			var joins atomic.Int32
			k.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
				k.KeepControl()
				if joins.Add(1) == 2 { // the first member's rejoin
					close(joining)
				}
				k.SleepControl(func() { <-release })
				return nil, nil, false
			})
			second := open(t, k.addr, group, topic)
			rctx, rcancel := context.WithCancel(context.Background())
			rdone := make(chan struct{})
			go func() { defer close(rdone); _, _ = second.Receive(rctx, 1) }()
			select {
			case <-joining:
			case <-time.After(30 * time.Second):
				t.Fatal("no join reached the broker")
			}
			took := w.stop(t)
			close(release)
			rcancel()
			<-rdone
			_ = second.Close(testenv.Context(t, 30*time.Second))
			_ = src.Close(testenv.Context(t, 30*time.Second))
			if took > stopWithin {
				t.Fatalf("stop took %v with a group join under way, want at most %v", took, stopWithin)
			}
			t.Logf("group join under way: stopped in %v", took.Round(100*time.Millisecond))
		})
	}
}
