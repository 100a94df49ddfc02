package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/sources/memsource"
)

// reporting is an in-process Source that keeps the Runtime it is attached
// with, so that a test reports for it what a Kafka or SQS source reports
// of its broker.
type reporting struct {
	consumer.Source
	rt broker.Runtime
}

func (s *reporting) Attach(rt broker.Runtime) { s.rt = rt; s.Source.Attach(rt) }

const brokerAddr = "10.1.2.3:9092"

var errFetchTimeout = errors.New("read tcp 127.0.0.1:50000->10.1.2.3:9092: i/o timeout")

// readyz is the readiness probe's status and body.
func readyz(t *testing.T, c *consumer.Consumer) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	c.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz/readyz", nil))
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}

// A broker the source reports failing turns readiness to 503 once the
// failure has lasted BrokerTimeout, with the broker's address and what
// was waited for in the body; its next answer turns it back to 200.
func TestBrokerFailureTurnsReadiness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")})
		src := &reporting{Source: q.Source()}
		c, _ := newRecorded(t, src, memstoretest.New(t), noopHandler())
		stop := runInBubble(t, c)
		synctest.Wait()
		if code, body := readyz(t, c); code != http.StatusOK {
			t.Fatalf("readyz %d %s before the broker failed, want 200", code, body)
		}
		failed := time.Now()
		// The source retries, and reports each failure.
		for range 6 {
			src.rt.Status(broker.Status{Broker: brokerAddr, Waiting: "fetch", Err: errFetchTimeout})
			time.Sleep(5 * time.Second)
			if time.Since(failed) < consumer.DefaultBrokerTimeout {
				if code, body := readyz(t, c); code != http.StatusOK {
					t.Fatalf("readyz %d %s %v into a broker failure, want 200 until %v", code, body, time.Since(failed), consumer.DefaultBrokerTimeout)
				}
			}
		}
		code, body := readyz(t, c)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, brokerAddr) || !strings.Contains(body, "fetch") ||
			!strings.Contains(body, "i/o timeout") {
			t.Fatalf("readyz %d %s after %v of broker failure: want 503 naming the broker, what was waited for and the error",
				code, body, time.Since(failed))
		}
		h := c.Health()
		if h.BrokerReachable || h.Broker != brokerAddr || !h.BrokerFailingSince.Equal(failed) || !h.Live {
			t.Fatalf("health %+v: want the broker unreachable since the first failure, still live", h)
		}
		// An answer to something else does not end the fetch's failure.
		src.rt.Status(broker.Status{Broker: brokerAddr, Waiting: "commit"})
		if code, _ := readyz(t, c); code != http.StatusServiceUnavailable {
			t.Fatalf("readyz %d after an answer to a commit, want 503 while fetches fail", code)
		}
		src.rt.Status(broker.Status{Broker: brokerAddr, Waiting: "fetch"})
		if code, body := readyz(t, c); code != http.StatusOK {
			t.Fatalf("readyz %d %s after the broker answered a fetch, want 200", code, body)
		}
		stop()
	})
}

// BrokerTimeout sets the bound; messages received end a failure as an
// answer does.
func TestBrokerTimeoutOptionAndFlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("first")})
		src := &reporting{Source: q.Source()}
		c, _ := newRecorded(t, src, memstoretest.New(t), noopHandler(), consumer.BrokerTimeout(10*time.Second))
		stop := runInBubble(t, c)
		synctest.Wait()
		src.rt.Status(broker.Status{Broker: brokerAddr, Waiting: "fetch", Err: errFetchTimeout})
		time.Sleep(10 * time.Second)
		if code, _ := readyz(t, c); code != http.StatusServiceUnavailable {
			t.Fatalf("readyz %d after 10s of failure with BrokerTimeout(10s), want 503", code)
		}
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("second")})
		synctest.Wait()
		if code, body := readyz(t, c); code != http.StatusOK {
			t.Fatalf("readyz %d %s once messages flow again, want 200", code, body)
		}
		stop()
		if _, err := consumer.New(q.Source(), memstoretest.New(t), noopHandler(), consumer.BrokerTimeout(0)); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Fatalf("BrokerTimeout(0): %v, want ErrInvalidConfig", err)
		}
	})
}

// While the broker fails, a line names it, what is waited for and for how
// long, within 10s and then at most 30s apart; its answer is said once.
func TestBrokerFailureLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")})
		src := &reporting{Source: q.Source()}
		c, logs := newRecorded(t, src, memstoretest.New(t), noopHandler())
		stop := runInBubble(t, c)
		synctest.Wait()
		// One failure only: a broker that hangs is reported once, when
		// the client gives up on a request, and is then silent.
		src.rt.Status(broker.Status{Broker: brokerAddr, Waiting: "group join", Err: errFetchTimeout})
		time.Sleep(100 * time.Second)
		synctest.Wait()
		lines := logs.with("waiting for the broker")
		at := []time.Duration{0}
		for _, l := range lines {
			if l.attrs["broker"].String() != brokerAddr || l.attrs["waiting_for"].String() != "group join" ||
				!strings.Contains(l.attrs["error"].String(), "i/o timeout") {
				t.Fatalf("line %v: want the broker, what is waited for and the error", l.attrs)
			}
			at = append(at, l.attrs["failing_for"].Duration())
		}
		at = append(at, 100*time.Second)
		if len(lines) == 0 || at[1] > 10*time.Second+5*time.Second {
			t.Fatalf("broker lines at %v into the failure, want the first within 15s", at[1:len(at)-1])
		}
		for i := 2; i < len(at); i++ {
			if gap := at[i] - at[i-1]; gap > 30*time.Second {
				t.Fatalf("broker lines at %v into the failure (then now, 100s): a gap of %v, want none over 30s", at[1:len(at)-1], gap)
			}
		}
		src.rt.Status(broker.Status{Broker: brokerAddr, Waiting: "group join"})
		back := logs.with("broker answering again")
		if len(back) != 1 || back[0].attrs["broker"].String() != brokerAddr || back[0].attrs["failed_for"].Duration() != 100*time.Second {
			t.Fatalf("answering lines %+v, want one naming the broker after 100s", back)
		}
		stop()
	})
}

// pausedStore is a store whose calls, once paused, hang until their
// context ends: a store that accepts connections and never answers.
type pausedStore struct {
	dedup.Store
	paused atomic.Bool
}

func (s *pausedStore) hang(ctx context.Context) error {
	if !s.paused.Load() {
		return nil
	}
	<-ctx.Done()
	return fmt.Errorf("store paused: %w", ctx.Err())
}

func (s *pausedStore) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	if err := s.hang(ctx); err != nil {
		return dedup.Claim{}, err
	}
	return s.Store.Claim(ctx, req)
}

func (s *pausedStore) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	if err := s.hang(ctx); err != nil {
		return err
	}
	return s.Store.Complete(ctx, req)
}

// stopTook cancels Run's context and returns how long, in the bubble, Run
// took to return.
func stopTook(t *testing.T, cancel context.CancelFunc, errc <-chan error) time.Duration {
	t.Helper()
	start := time.Now()
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	took := time.Since(start)
	t.Logf("stopped in %v", took)
	return took
}

// A stop in a store outage does not wait for the drain: the message held
// through the outage is given back and Run returns within 10s, logging
// what it gave back and why it did not wait.
func TestStopInStoreOutageIsPrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")})
		c, logs := newRecorded(t, q.Source(), outageStore(t, 1<<30), noopHandler(), consumer.FailedRetryDelay(time.Second))
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- c.Run(ctx) }()
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if took := stopTook(t, cancel, errc); took > 10*time.Second {
			t.Fatalf("stop took %v in a store outage, want at most 10s", took)
		}
		stopped := logs.with("stopped")
		if len(stopped) != 1 || !strings.Contains(stopped[0].attrs["cut_short_by"].String(), "store") {
			t.Fatalf("stop lines %+v: want one saying the store cut the drain short", stopped)
		}
		if st := q.Stats(); st.Acked != 0 {
			t.Fatalf("queue %+v: want the message given back, not acked", st)
		}
	})
}

// A store that hangs (calls under way that it never answers) turns the
// consumer not ready within 5s, before any call has failed; a stop then
// returns within 10s: the calls are not waited for to their deadline.
func TestStopWhileStoreHangsIsPrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("first")})
		store := &pausedStore{Store: memstoretest.New(t)}
		c, _ := newRecorded(t, q.Source(), store, noopHandler())
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- c.Run(ctx) }()
		synctest.Wait()
		store.paused.Store(true)
		for _, body := range []string{"second", "third"} {
			_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte(body)})
		}
		time.Sleep(500 * time.Millisecond) // their claims under way, unanswered
		synctest.Wait()
		if h := c.Health(); !h.StoreReachable {
			t.Fatalf("health %+v: store unreachable after 500ms of a call under way", h)
		}
		time.Sleep(5 * time.Second)
		if h := c.Health(); h.StoreReachable || h.Ready {
			t.Fatalf("health %+v after 5.5s of calls unanswered: want the store unreachable, not ready", h)
		}
		if took := stopTook(t, cancel, errc); took > 10*time.Second {
			t.Fatalf("stop took %v while the store hangs, want at most 10s", took)
		}
	})
}

// A stop while the broker fails does not wait for the drain either.
func TestStopWhileBrokerFailsIsPrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")})
		src := &reporting{Source: q.Source()}
		release := make(chan struct{})
		h := consumer.HandlerFunc(func(ctx context.Context, _ *consumer.Message) (consumer.Result, error) {
			select { // a long handler, still running at the stop
			case <-ctx.Done():
				return consumer.Result{}, ctx.Err()
			case <-release:
				return consumer.Result{}, nil
			}
		})
		c, logs := newRecorded(t, src, memstoretest.New(t), h)
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- c.Run(ctx) }()
		synctest.Wait()
		src.rt.Status(broker.Status{Broker: brokerAddr, Waiting: "fetch", Err: errFetchTimeout})
		if took := stopTook(t, cancel, errc); took > 10*time.Second {
			t.Fatalf("stop took %v while the broker fails, want at most 10s", took)
		}
		close(release)
		stopped := logs.with("stopped")
		if len(stopped) != 1 || !strings.Contains(stopped[0].attrs["cut_short_by"].String(), brokerAddr) ||
			stopped[0].attrs["handlers_cancelled"].Int64() != 1 {
			t.Fatalf("stop lines %+v: want one naming the broker, with the handler cancelled", stopped)
		}
	})
}
