package consumer_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// Outcome.Attempt is the attempt number of the claim the processing won,
// in either store mode, and 0 when it won none: never the delivery count.
func TestOutcomeAttemptIsTheClaimsInEveryMode(t *testing.T) {
	clk := &manualClock{now: time.Unix(1_700_000_000, 0)}
	fail := true
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		if fail {
			return consumer.Result{}, errors.New("boom")
		}
		return consumer.Result{Response: []byte("ok")}, nil
	})
	for _, mode := range []struct {
		name string
		opts []consumer.GuardOption
		// what a failed handler run's outcome says: claim first, the
		// claim's number; in one round trip the handler fails before any
		// claim
		failedAttempt, processedAttempt int
	}{
		{"claim first", nil, 1, 2},
		{"one round trip", []consumer.GuardOption{consumer.OneRoundTrip()}, 0, 1},
	} {
		t.Run(mode.name, func(t *testing.T) {
			fail = true
			opts := append([]consumer.GuardOption{consumer.WithClock(clk), consumer.FailedRetryDelay(time.Second),
				consumer.WithoutCompletedCache()}, mode.opts...)
			g, err := consumer.NewGuard(memstoretest.New(t), h, opts...)
			if err != nil {
				t.Fatal(err)
			}
			msg := func() *consumer.Message {
				return &consumer.Message{ID: "1", Body: []byte("order " + mode.name), Deliveries: 3}
			}
			if o := g.Process(t.Context(), msg()); o.Kind != consumer.Retrying || o.Attempt != mode.failedAttempt {
				t.Fatalf("failed run: %v attempt %d, want retrying attempt %d (delivery 3 is not an attempt)", o.Kind, o.Attempt, mode.failedAttempt)
			}
			clk.Advance(5 * time.Second)
			fail = false
			if o := g.Process(t.Context(), msg()); o.Kind != consumer.Processed || o.Attempt != mode.processedAttempt {
				t.Fatalf("second run: %v attempt %d, want processed attempt %d", o.Kind, o.Attempt, mode.processedAttempt)
			}
			if o := g.Process(t.Context(), msg()); o.Kind != consumer.Duplicate || o.Attempt != 0 {
				t.Fatalf("duplicate: %v attempt %d, want duplicate attempt 0 (no claim won)", o.Kind, o.Attempt)
			}
		})
	}
}

// heartbeatLog records each lease renewal reported: its error and its
// message's ID.
type heartbeatLog struct {
	mu    sync.Mutex
	lease []error
	ids   []string
}

func (l *heartbeatLog) OnMessageHeartbeat(_ context.Context, m *consumer.Message, lease bool, err error) {
	if lease {
		l.mu.Lock()
		l.lease = append(l.lease, err)
		l.ids = append(l.ids, m.ID)
		l.mu.Unlock()
	}
}

// The Guard reuses a lease renewal once its handler has returned: each
// handler's lease is renewed on its own schedule, and no renewal comes for
// a handler that has returned, whether it had been renewed or not.
func TestRenewalReuseKeepsRenewalsApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &heartbeatLog{}
		h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
			if strings.HasPrefix(string(m.Body), "slow") {
				time.Sleep(2200 * time.Millisecond) // renewals at 1s and 2s
			}
			return consumer.Result{}, nil
		})
		g, err := consumer.NewGuard(memstoretest.New(t), h, consumer.LeaseTTL(3*time.Second), consumer.HandlerTimeout(time.Second/2),
			consumer.WithHooks(log))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			body := "fast"
			if i%3 == 0 {
				body = "slow"
			}
			m := &consumer.Message{ID: strconv.Itoa(i), Body: []byte(body + strconv.Itoa(i)), Deliveries: 1}
			if o := g.Process(t.Context(), m); o.Kind != consumer.Processed {
				t.Fatalf("message %d: outcome %v (%v)", i, o.Kind, o.Err)
			}
			time.Sleep(400 * time.Millisecond)
		}
		time.Sleep(10 * time.Second) // any renewal still armed would come now
		synctest.Wait()
		log.mu.Lock()
		defer log.mu.Unlock()
		if got, want := strings.Join(log.ids, ","), "0,0,3,3"; got != want {
			t.Fatalf("renewals for messages %s, want %s", got, want)
		}
	})
}

// heldExtend is a Store whose Extend waits until release is closed.
type heldExtend struct {
	dedup.Store
	release chan struct{}
}

func (s heldExtend) Extend(ctx context.Context, req dedup.ExtendRequest) error {
	<-s.release
	return s.Store.Extend(ctx, req)
}

// A lease renewal still in flight when its handler returns is not reused:
// the renewal, when it lands, is reported for its own message and arms
// nothing for the next one.
func TestRenewalInFlightNotReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &heartbeatLog{}
		store := heldExtend{Store: memstoretest.New(t), release: make(chan struct{})}
		h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
			time.Sleep(1500 * time.Millisecond) // one renewal begun, at 1s
			return consumer.Result{}, nil
		})
		g, err := consumer.NewGuard(store, h, consumer.LeaseTTL(3*time.Second), consumer.HandlerTimeout(time.Second/2),
			consumer.WithHooks(log))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			m := &consumer.Message{ID: strconv.Itoa(i), Body: []byte("body" + strconv.Itoa(i)), Deliveries: 1}
			if o := g.Process(t.Context(), m); o.Kind != consumer.Processed {
				t.Fatalf("message %d: outcome %v (%v)", i, o.Kind, o.Err)
			}
		}
		close(store.release) // both renewals land, after their handlers returned
		time.Sleep(10 * time.Second)
		synctest.Wait()
		log.mu.Lock()
		defer log.mu.Unlock()
		slices.Sort(log.ids) // the two land in either order
		if got, want := strings.Join(log.ids, ","), "0,1"; got != want {
			t.Fatalf("renewals for messages %s, want %s", got, want)
		}
	})
}

// Guard.Process renews a running handler's lease every third of LeaseTTL
// and, as a Consumer does, shows each renewal to HookMessageHeartbeat.
func TestGuardLeaseRenewalsSeenByHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &heartbeatLog{}
		h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
			time.Sleep(2200 * time.Millisecond) // two renewals: at 1s and 2s
			return consumer.Result{}, nil
		})
		g, err := consumer.NewGuard(memstoretest.New(t), h, consumer.LeaseTTL(3*time.Second), consumer.HandlerTimeout(time.Second/2),
			consumer.WithHooks(log))
		if err != nil {
			t.Fatal(err)
		}
		o := g.Process(t.Context(), &consumer.Message{ID: "1", Body: []byte("slow"), Deliveries: 1})
		if o.Kind != consumer.Processed {
			t.Fatalf("outcome %v (%v), want processed", o.Kind, o.Err)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.lease) != 2 || log.lease[0] != nil || log.lease[1] != nil {
			t.Fatalf("lease heartbeats seen: %v, want two that succeeded", log.lease)
		}
	})
}
