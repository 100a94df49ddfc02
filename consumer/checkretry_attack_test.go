package consumer_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/retry"
)

// scriptedCheckStore answers its checks from a script, one error a check
// (nil passes to the real store), repeating the last once it runs out. An
// answer may take a while first, as a slow endpoint does.
type scriptedCheckStore struct {
	dedup.Store
	mu     sync.Mutex
	script []error
	delay  time.Duration
	checks int
}

func (s *scriptedCheckStore) Check(ctx context.Context) error {
	s.mu.Lock()
	s.checks++
	err := s.script[min(s.checks, len(s.script))-1]
	s.mu.Unlock()
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err == nil {
		return s.Store.Check(ctx)
	}
	return err
}

func (s *scriptedCheckStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checks
}

// A fault of the deployment (a missing table, denied access, an invalid
// request) is not a fault of the moment: it is not checked again, and Run
// stops at once with an error that names it, whether it comes first or
// after a check that failed for the moment.
func TestStoreCheckFaultOfDeploymentNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script []error
		checks int
		took   time.Duration
		names  string
	}{
		{"missing table", []error{apiError{"ResourceNotFoundException"}}, 1, 0, "ResourceNotFoundException"},
		{"denied", []error{apiError{"AccessDeniedException"}}, 1, 0, "AccessDeniedException"},
		{"invalid request", []error{apiError{"ValidationException"}}, 1, 0, "ValidationException"},
		{"stated misconfigured", []error{retry.WithClass(errors.New("table orders-dedup has no ttl attribute"), retry.Misconfigured)}, 1, 0, "orders-dedup"},
		{"missing after a 500", []error{apiError{"InternalServerError"}, apiError{"ResourceNotFoundException"}}, 2, time.Second, "ResourceNotFoundException"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &scriptedCheckStore{Store: memstoretest.New(t), script: tc.script}
				c := checkConsumer(t, "check-fatal", store, time.Minute)
				start := time.Now()
				err := c.Run(context.Background())
				if !errors.Is(err, consumer.ErrMisconfigured) {
					t.Fatalf("Run = %v, want ErrMisconfigured", err)
				}
				if !strings.Contains(err.Error(), tc.names) {
					t.Errorf("Run = %q, want the error to name %s", err, tc.names)
				}
				if took, n := time.Since(start), store.count(); n != tc.checks || took != tc.took {
					t.Fatalf("stopped after %v and %d checks, want %v and %d: a fault of the deployment is not retried", took, n, tc.took, tc.checks)
				}
			})
		})
	}
}

// Throttles and resets are faults of the moment, as a 5xx is: checked again
// a second later, and the run goes on once the store answers.
func TestStoreCheckRetriesThrottleAndReset(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"throttle", apiError{"ThrottlingException"}},
		{"provisioned throughput", apiError{"ProvisionedThroughputExceededException"}},
		{"reset", retry.WithClass(errors.New("read tcp 10.0.0.1:4567: connection reset by peer"), retry.Transient)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &scriptedCheckStore{Store: memstoretest.New(t), script: []error{tc.err, tc.err, nil}}
				c := checkConsumer(t, "check-throttle", store, 10*time.Second)
				start := time.Now()
				if err := c.Check(context.Background()); err != nil {
					t.Fatalf("Check = %v, want the store checked again until it answers", err)
				}
				if took, n := time.Since(start), store.count(); n != 3 || took != 2*time.Second {
					t.Fatalf("passed after %v and %d checks, want 2s and 3 (a second apart)", took, n)
				}
			})
		})
	}
}

// A cancel during the wait between checks ends Run at once, and as a
// cancel (nil), not as a fault of the deployment; Check returns at once too.
func TestStoreCheckRetryEndsAtCancel(t *testing.T) {
	t.Run("Run", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := &scriptedCheckStore{Store: memstoretest.New(t), script: []error{apiError{"InternalServerError"}}}
			c := checkConsumer(t, "check-cancel", store, time.Hour)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			time.Sleep(2500 * time.Millisecond) // in the bubble: fake time, between the third and fourth checks
			synctest.Wait()
			if n := store.count(); n != 3 {
				t.Fatalf("%d checks in 2.5s, want 3", n)
			}
			cancel()
			synctest.Wait()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run = %v after a cancel during its checks, want nil (a cancel, not a fault)", err)
				}
			default:
				t.Fatal("Run still waiting to check the store again after its context was cancelled")
			}
			if n := store.count(); n != 3 {
				t.Fatalf("%d checks, want none after the cancel", n)
			}
		})
	})
	t.Run("Check", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := &scriptedCheckStore{Store: memstoretest.New(t), script: []error{apiError{"InternalServerError"}}}
			c := checkConsumer(t, "check-cancel", store, time.Hour)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Check(ctx) }()
			time.Sleep(1500 * time.Millisecond)
			cancel()
			synctest.Wait()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("Check = nil after a cancel with the store failing, want an error")
				}
			default:
				t.Fatal("Check still waiting to check the store again after its context was cancelled")
			}
		})
	})
}

// CheckTimeout bounds the store's check as a whole, retries included: a
// store that keeps failing, or that is slow to fail, or that never answers,
// stops Run by CheckTimeout, with an error that names the last failure.
func TestStoreCheckRetryWithinCheckTimeout(t *testing.T) {
	const bound = 5 * time.Second
	for _, tc := range []struct {
		name  string
		delay time.Duration
		names string
	}{
		{"fails at once", 0, "InternalServerError"},
		{"slow to fail", 3 * time.Second, "InternalServerError"},
		{"never answers", time.Hour, "deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &scriptedCheckStore{Store: memstoretest.New(t), script: []error{apiError{"InternalServerError"}}, delay: tc.delay}
				c := checkConsumer(t, "check-bound", store, bound)
				start := time.Now()
				err := c.Run(context.Background())
				took := time.Since(start)
				if !errors.Is(err, consumer.ErrMisconfigured) {
					t.Fatalf("Run = %v, want ErrMisconfigured", err)
				}
				if took > bound {
					t.Fatalf("Run stopped after %v (%d checks), want within CheckTimeout %v", took, store.count(), bound)
				}
				if !strings.Contains(err.Error(), tc.names) {
					t.Errorf("Run = %q, want it to name %s", err, tc.names)
				}
			})
		})
	}
}

// A store check retried is seen: each failure is logged as a warning that
// names it, while Run waits. The warning is of a fault of the moment, so its
// error does not call the deployment misconfigured (what an alert on a
// misconfigured consumer looks for).
func TestStoreCheckRetryLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "check-seen")
		store := &scriptedCheckStore{Store: memstoretest.New(t), script: []error{apiError{"InternalServerError"}}}
		logs := newLogRecorder()
		c, err := consumer.New(q.Source(), store, noopHandler(), consumer.CheckTimeout(time.Hour), consumer.WithLogger(slog.New(logs)))
		if err != nil {
			t.Fatal(err)
		}
		stop := runInBubble(t, c)
		time.Sleep(2500 * time.Millisecond) // in the bubble: fake time
		synctest.Wait()
		logs.mu.Lock()
		var seen []string
		for _, line := range logs.lines {
			text := line.msg
			for k, v := range line.attrs {
				text += " " + k + "=" + v.String()
			}
			if line.level >= slog.LevelWarn && strings.Contains(text, "InternalServerError") {
				seen = append(seen, text)
			}
		}
		logs.mu.Unlock()
		stop()
		if len(seen) != 3 {
			t.Fatalf("%d warnings naming the failure for 3 failed store checks, want 3: %q", len(seen), seen)
		}
		for _, w := range seen {
			if strings.Contains(w, "misconfigured") {
				t.Errorf("warning of a fault of the moment calls the deployment misconfigured: %s", w)
			}
		}
	})
}

// While the store's start-up check fails for the moment, Health says the
// store is not reachable and since when, as it does for an outage met later.
func TestHealthWhileStoreCheckRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &scriptedCheckStore{Store: memstoretest.New(t), script: []error{apiError{"InternalServerError"}}}
		c := checkConsumer(t, "check-health", store, time.Hour)
		start := time.Now()
		stop := runInBubble(t, c)
		time.Sleep(2500 * time.Millisecond) // in the bubble: fake time
		synctest.Wait()
		h := c.Health()
		stop()
		if h.State != "checking" || h.Ready || h.StoreReachable || !h.StoreUnavailableSince.Equal(start) {
			t.Fatalf("Health after 3 failed store checks: state %s, ready %v, store reachable %v since %v, reasons %q; want checking, not ready, store unreachable since %v",
				h.State, h.Ready, h.StoreReachable, h.StoreUnavailableSince, h.Reasons, start)
		}
	})
}

// checkConsumer is a consumer of a new memory queue over store, its
// start-up checks bounded by timeout, its log discarded.
func checkConsumer(t *testing.T, queue string, store dedup.Store, timeout time.Duration) *consumer.Consumer {
	t.Helper()
	q := memsourcetest.NewQueue(t, queue)
	c, err := consumer.New(q.Source(), store, noopHandler(), consumer.CheckTimeout(timeout),
		consumer.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
