package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// The Wrapper cases run the consumer over [Wrapped] and prove that each
// capability the Source declares still takes effect: each fails if the
// decorator hid the Source's Capabilities.

// outcomes records what became of each message, by body.
type outcomes struct {
	mu    sync.Mutex
	kinds map[string][]consumer.Kind
}

func (o *outcomes) OnMessageOutcome(_ context.Context, m *consumer.Message, out consumer.Outcome, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.kinds == nil {
		o.kinds = map[string][]consumer.Kind{}
	}
	o.kinds[string(m.Body)] = append(o.kinds[string(m.Body)], out.Kind)
}

func (o *outcomes) processed() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, ks := range o.kinds {
		for _, k := range ks {
			if k == consumer.Processed {
				n++
			}
		}
	}
	return n
}

func (o *outcomes) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprint(o.kinds)
}

// runConsumer runs a consumer over w until the test ends or stop is
// called; Run's error fails the test. Cases other than the dead-letter one
// pass WithoutDeadLetters, so that each fails for its own capability.
func runConsumer(t *testing.T, w *Wrapped, h consumer.Handler, opts ...consumer.Option) (seen *outcomes, stop func()) {
	t.Helper()
	seen = &outcomes{}
	base := []consumer.Option{consumer.WithHooks(seen), consumer.PendingRecheck(100 * time.Millisecond),
		consumer.FailedRetryDelay(50 * time.Millisecond), consumer.DrainTimeout(10 * time.Second)}
	c, err := consumer.New(w, memstoretest.New(t), h, append(base, opts...)...)
	if err != nil {
		t.Fatalf("consumer.New over a wrapped source: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Error("consumer did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return seen, stop
}

// A Source with a dead-letter destination is accepted without
// WithoutDeadLetters, and a poison message reaches the destination.
func testWrapperDeadLetter(t *testing.T, h *Harness) {
	w := Wrap(h.Source)
	poison := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{}, consumer.Permanent(errors.New("bad input"))
	})
	if !h.Source.Capabilities().DeadLetter {
		if _, err := consumer.New(w, memstoretest.New(t), poison); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Fatalf("consumer.New accepted a source without a dead-letter destination: %v", err)
		}
		return
	}
	runConsumer(t, w, poison)
	send(t, h, Outgoing{Key: "k", Body: []byte("wrapped-poison")})
	waitDeadLetter(t, h, "wrapped-poison")
}

// A handler that runs longer than the delivery timeout is not delivered
// again meanwhile: the consumer extends the delivery through the wrapper.
func testWrapperDeliveryTimeout(t *testing.T, h *Harness) {
	timeout := h.Source.Capabilities().DeliveryTimeout
	if timeout <= 0 {
		t.Skip("deliveries of this source never time out")
	}
	w := Wrap(h.Source)
	var mu sync.Mutex
	var ids []string
	slow := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		mu.Lock()
		ids = append(ids, m.ID)
		mu.Unlock()
		select {
		case <-time.After(2*timeout + timeout/2):
			return consumer.Result{}, nil
		case <-ctx.Done():
			return consumer.Result{}, ctx.Err()
		}
	})
	seen, stop := runConsumer(t, w, slow, consumer.WithoutDeadLetters(), consumer.HandlerTimeout(4*timeout+10*time.Second),
		consumer.LeaseTTL(8*timeout+30*time.Second))
	send(t, h, Outgoing{Key: "k", Body: []byte("slow"), Attributes: map[string]string{"idempotency-key": "slow-1"}})
	testenv.Eventually(t, h.wait()+3*timeout, "the slow message was not processed", func() bool { return seen.processed() == 1 })
	time.Sleep(timeout + time.Second) // a redelivery, had there been one, shows by now
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 1 {
		t.Fatalf("handler ran %d times, want 1 (outcomes %v)", len(ids), seen)
	}
	if n := w.Deliveries(ids[0]); n != 1 {
		t.Fatalf("delivered %d times while its handler ran (delivery timeout %v): the consumer did not extend it", n, timeout)
	}
}

// The consumer keeps COMPLETED records longer than the Source may
// redeliver: a shorter Retention is refused, a longer one accepted.
func testWrapperRedeliveryWindow(t *testing.T, h *Harness) {
	window := h.Source.Capabilities().RedeliveryWindow
	if window <= 0 {
		t.Skip("source declares no redelivery window")
	}
	w := Wrap(h.Source)
	nop := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	// WithoutDeadLetters keeps the dead-letter check out of the way: the
	// only reason left to refuse is the retention.
	if _, err := consumer.New(w, memstoretest.New(t), nop, consumer.WithoutDeadLetters(), consumer.Retention(window)); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Fatalf("Retention %v over a redelivery window of %v: %v, want ErrInvalidConfig", window, window, err)
	}
	if _, err := consumer.New(w, memstoretest.New(t), nop, consumer.WithoutDeadLetters(), consumer.Retention(window+time.Hour)); err != nil {
		t.Fatalf("Retention above the redelivery window refused: %v", err)
	}
}

// A key's messages run one at a time, in order: a failed head is retried
// in place, held by the consumer, not given back to be overtaken.
func testWrapperOrdering(t *testing.T, h *Harness) {
	if h.Source.Capabilities().Ordering == broker.Unordered {
		t.Skip("source declares no ordering")
	}
	const n = 5
	w := Wrap(h.Source)
	var mu sync.Mutex
	var ran []string
	headID := ""
	h1 := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, string(m.Body))
		if string(m.Body) == "order-0" && headID == "" {
			headID = m.ID
			return consumer.Result{}, errors.New("first attempt fails")
		}
		return consumer.Result{}, nil
	})
	seen, stop := runConsumer(t, w, h1, consumer.WithoutDeadLetters(), consumer.Concurrency(8))
	var out []Outgoing
	for i := range n {
		body := fmt.Sprintf("order-%d", i)
		out = append(out, Outgoing{Key: "same", Body: []byte(body), Attributes: map[string]string{"idempotency-key": body}})
	}
	send(t, h, out...)
	testenv.Eventually(t, 2*h.wait(), "not every message processed", func() bool { return seen.processed() == n })
	stop()
	mu.Lock()
	defer mu.Unlock()
	want := []string{"order-0", "order-0", "order-1", "order-2", "order-3", "order-4"}
	if !slices.Equal(ran, want) {
		t.Fatalf("handlers ran %v, want %v", ran, want)
	}
	if d := w.Deliveries(headID); d != 1 {
		t.Fatalf("the failed head was delivered %d times: given back rather than retried in place", d)
	}
}

// The consumer keys messages with the Source's DefaultKey.
func testWrapperDefaultKey(t *testing.T, h *Harness) {
	if h.Source.Capabilities().DefaultKey != broker.KeyFromRecord {
		t.Skip("source declares the consumer's default key")
	}
	w := Wrap(h.Source)
	got := make(chan [2]string, 1)
	h1 := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		k, err := broker.Fingerprint(m)
		if err != nil {
			return consumer.Result{}, consumer.Permanent(err)
		}
		keyOf := dedup.Key
		if broker.FingerprintCoversBody(m) {
			keyOf = dedup.DerivedKey // a key derived from the message
		}
		want, err := keyOf("wrapped", k)
		if err != nil {
			return consumer.Result{}, consumer.Permanent(err)
		}
		select {
		case got <- [2]string{m.IdempotencyKey, want}:
		default:
		}
		return consumer.Result{}, nil
	})
	runConsumer(t, w, h1, consumer.WithoutDeadLetters(), consumer.Namespace("wrapped"))
	// No idempotency-key attribute: the key comes from DefaultKey alone.
	send(t, h, Outgoing{Key: "k", Body: []byte("keyed")})
	select {
	case k := <-got:
		if k[0] != k[1] {
			t.Fatalf("claimed key %q, want the source's default key %q", k[0], k[1])
		}
	case <-time.After(h.wait()):
		t.Fatal("message not handled")
	}
}
