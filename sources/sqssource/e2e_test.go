package sqssource_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/sourcetest"
	"github.com/onceq/onceq/sources/sqssource"
)

// outcomes counts outcomes by kind.
type outcomes struct {
	mu    sync.Mutex
	kinds map[consumer.Kind]int
	total atomic.Int64
}

func (o *outcomes) OnMessageOutcome(_ context.Context, _ *consumer.Message, out consumer.Outcome, _ time.Duration) {
	o.mu.Lock()
	if o.kinds == nil {
		o.kinds = map[consumer.Kind]int{}
	}
	o.kinds[out.Kind]++
	o.mu.Unlock()
	o.total.Add(1)
}

func (o *outcomes) count(k consumer.Kind) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.kinds[k]
}

func (o *outcomes) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprint(o.kinds)
}

// runConsumer runs c until stop is called; stop returns Run's error.
func runConsumer(t testing.TB, c *consumer.Consumer) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				err = errors.New("consumer did not stop within 60s")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// withDuplicateSends returns unique orders followed by dups of them sent
// again (the same idempotency key, a new SQS message): every stride-th
// order, wrapping around.
func withDuplicateSends(unique, dups, stride int) []sourcetest.Outgoing {
	msgs := make([]sourcetest.Outgoing, 0, unique+dups)
	for i := range unique {
		key := fmt.Sprintf("order-%05d", i)
		msgs = append(msgs, sourcetest.Outgoing{Body: []byte(`{"order":"` + key + `"}`),
			Attributes: map[string]string{consumer.IdempotencyKeyAttribute: key}})
	}
	for i := range dups {
		msgs = append(msgs, msgs[(i*stride)%unique]) // the same message, sent again
	}
	return msgs
}

// runUntilSettled runs cons until seen has counted total messages processed
// or found duplicate, then stops it and logs the throughput.
func runUntilSettled(t *testing.T, cons *consumer.Consumer, seen *outcomes, total int, within time.Duration) {
	t.Helper()
	stop := runConsumer(t, cons)
	start := time.Now()
	testenv.Eventually(t, within, "not every message was settled", func() bool {
		return seen.count(consumer.Processed)+seen.count(consumer.Duplicate) >= total
	})
	took := time.Since(start)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("%d messages in %v (%.0f msg/s); outcomes %v", total, took, float64(total)/took.Seconds(), seen)
}

// (a) 5,000 messages, a quarter of them duplicate sends (same idempotency
// key, a new SQS message), 16 workers: every effect happens once and the
// queue ends empty.
func TestEndToEndDuplicates(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	const total, dups = 5000, 1250
	const unique = total - dups
	msgs := withDuplicateSends(unique, dups, 3)
	rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	if err := sendBatch(context.Background(), c, url, false, msgs); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	effects := map[string]int{}
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		key := m.Attributes[consumer.IdempotencyKeyAttribute]
		return consumer.Result{Writes: []dedup.Write{memstore.Write{Apply: func() {
			mu.Lock()
			effects[key]++
			mu.Unlock()
		}}}}, nil
	})
	// No call may fail: a lost ReceiveMessage answer (see callOptions in
	// source.go) would hide ten messages for 30s.
	var callFailures atomic.Int32
	src := newSource(t, c, url, sqssource.WithHooks(onRetry(func(_ context.Context, op string, _ retry.Class, err error) {
		callFailures.Add(1)
		t.Logf("%s failed: %v", op, err)
	})))
	seen := &outcomes{}
	cons, err := consumer.New(src, memstoretest.New(t), h, consumer.WithoutDeadLetters(), consumer.Concurrency(16), consumer.WithHooks(seen),
		consumer.PendingRecheck(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runUntilSettled(t, cons, seen, total, 120*time.Second)

	mu.Lock()
	defer mu.Unlock()
	if len(effects) != unique {
		t.Errorf("%d keys had effects, want %d", len(effects), unique)
	}
	for k, n := range effects {
		if n != 1 {
			t.Errorf("key %s: %d effects", k, n)
		}
	}
	if n := callFailures.Load(); n > 0 {
		t.Errorf("%d SQS calls failed", n)
	}
	if n := seen.count(consumer.Processed); n != unique {
		t.Errorf("%d processed, want %d", n, unique)
	}
	if vis, inflight := depth(t, c, url); vis != 0 || inflight != 0 {
		t.Errorf("queue not empty at the end: %d visible, %d in flight", vis, inflight)
	}
}

// (b) A handler that runs three visibility timeouts long is not delivered
// again meanwhile: the consumer extends the visibility.
func TestEndToEndLongHandler(t *testing.T) {
	t.Parallel()
	c := client(t)
	const visibility = 2 * time.Second
	url, _ := createQueue(t, c, queueSpec{visibility: visibility})
	if err := send(context.Background(), c, url, false, sourcetest.Outgoing{Body: []byte("slow"),
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "slow-1"}}); err != nil {
		t.Fatal(err)
	}
	var calls, extends atomic.Int32
	var id atomic.Value
	done := make(chan struct{})
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		if calls.Add(1) == 1 {
			id.Store(m.ID)
			defer close(done)
		}
		select {
		case <-time.After(3 * visibility):
		case <-ctx.Done():
			return consumer.Result{}, ctx.Err()
		}
		return consumer.Result{}, nil
	})
	// Every delivery is counted: a redelivery while the handler runs (its
	// visibility lapsing) is received by the pollers, which poll all along.
	src := sourcetest.Wrap(newSource(t, c, url, sqssource.WaitTime(time.Second), sqssource.WithHooks(onExtended(func(context.Context, string, time.Duration) { extends.Add(1) }))))
	seen := &outcomes{}
	cons, err := consumer.New(src, memstoretest.New(t), h, consumer.WithoutDeadLetters(), consumer.Concurrency(4), consumer.WithHooks(seen),
		consumer.HandlerTimeout(20*time.Second), consumer.LeaseTTL(30*time.Second),
		consumer.PendingRecheck(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, cons)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("handler did not finish")
	}
	testenv.Eventually(t, 10*time.Second, "not processed", func() bool { return seen.count(consumer.Processed) == 1 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := src.Deliveries(id.Load().(string)); n != 1 {
		t.Errorf("the message was delivered %d times, want once: delivered again while its handler ran", n)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	if n := seen.total.Load(); n != 1 {
		t.Errorf("%d outcomes (%v), want one: the message was delivered again while its handler ran", n, seen)
	}
	if n := extends.Load(); n < 2 {
		t.Errorf("visibility extended %d times over a %v handler with a %v timeout", n, 3*visibility, visibility)
	}
	if vis, inflight := depth(t, c, url); vis+inflight != 0 {
		t.Errorf("queue not empty: %d visible, %d in flight", vis, inflight)
	}
}

// (c) FIFO: each group's messages are handled one at a time and in order,
// while different groups run at once.
func TestEndToEndFIFOOrder(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{fifo: true, visibility: 10 * time.Second})
	const groups, per = 8, 25
	var msgs []sourcetest.Outgoing
	for i := range per {
		for g := range groups {
			body := fmt.Sprintf("g%d-%03d", g, i)
			msgs = append(msgs, sourcetest.Outgoing{Key: fmt.Sprintf("g%d", g), Body: []byte(body),
				Attributes: map[string]string{consumer.IdempotencyKeyAttribute: body}})
		}
	}
	if err := sendBatch(context.Background(), c, url, true, msgs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	order := map[string][]string{}
	running := map[string]int{}
	var overlap, maxRunning, violations int
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		mu.Lock()
		running[m.OrderingKey]++
		if running[m.OrderingKey] > 1 {
			violations++
		}
		if len(running) > 1 {
			overlap++
		}
		maxRunning = max(maxRunning, len(running))
		mu.Unlock()
		time.Sleep(3 * time.Millisecond) // the handler's work: long enough for groups to overlap, proves nothing by itself
		mu.Lock()
		if running[m.OrderingKey]--; running[m.OrderingKey] == 0 {
			delete(running, m.OrderingKey)
		}
		mu.Unlock()
		return consumer.Result{Writes: []dedup.Write{memstore.Write{Apply: func() {
			mu.Lock()
			order[m.OrderingKey] = append(order[m.OrderingKey], string(m.Body))
			mu.Unlock()
		}}}}, nil
	})
	src := newSource(t, c, url)
	seen := &outcomes{}
	cons, err := consumer.New(src, memstoretest.New(t), h, consumer.WithoutDeadLetters(), consumer.Concurrency(16), consumer.WithHooks(seen))
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, cons)
	testenv.Eventually(t, 60*time.Second, "not every message processed", func() bool {
		return seen.count(consumer.Processed) >= groups*per
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if violations > 0 {
		t.Errorf("%d times two messages of one group ran at once", violations)
	}
	if maxRunning < 2 {
		t.Errorf("at most %d groups ran at once: groups were not concurrent", maxRunning)
	}
	for g := range groups {
		key := fmt.Sprintf("g%d", g)
		got := order[key]
		if len(got) != per {
			t.Errorf("group %s: %d effects, want %d", key, len(got), per)
		}
		for i, b := range got {
			if want := fmt.Sprintf("%s-%03d", key, i); b != want {
				t.Fatalf("group %s out of order at %d: %v", key, i, got)
			}
		}
	}
	if vis, inflight := depth(t, c, url); vis+inflight != 0 {
		t.Errorf("queue not empty: %d visible, %d in flight", vis, inflight)
	}
	t.Logf("up to %d groups at once; %d overlapping handler starts", maxRunning, overlap)
}

// (d) A poison message goes to the dead-letter queue after MaxAttempts,
// with its reason; its neighbours are processed.
func TestEndToEndPoison(t *testing.T) {
	t.Parallel()
	c := client(t)
	dlqURL, _ := createQueue(t, c, queueSpec{})
	url, _ := createQueue(t, c, queueSpec{visibility: 5 * time.Second})
	for _, b := range []string{"fine-1", "poison", "fine-2"} {
		if err := send(context.Background(), c, url, false, sourcetest.Outgoing{Body: []byte(b),
			Attributes: map[string]string{consumer.IdempotencyKeyAttribute: b}}); err != nil {
			t.Fatal(err)
		}
	}
	var poisonRuns atomic.Int32
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		if string(m.Body) == "poison" {
			return consumer.Result{}, fmt.Errorf("cannot parse order (run %d)", poisonRuns.Add(1))
		}
		return consumer.Result{}, nil
	})
	const maxAttempts = 3
	src := newSource(t, c, url, sqssource.DeadLetterQueue(dlqURL), sqssource.WaitTime(time.Second))
	seen := &outcomes{}
	cons, err := consumer.New(src, memstoretest.New(t), h, consumer.WithoutDeadLetters(), consumer.WithHooks(seen),
		consumer.MaxAttempts(maxAttempts), consumer.FailedRetryDelay(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, cons)
	testenv.Eventually(t, 60*time.Second, "poison message not dead-lettered", func() bool {
		return seen.count(consumer.DeadLettered) == 1 && seen.count(consumer.Processed) == 2
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := poisonRuns.Load(); n != maxAttempts {
		t.Errorf("poison handler ran %d times, want MaxAttempts = %d", n, maxAttempts)
	}
	dl, err := readAll(context.Background(), c, dlqURL, 30*time.Second)
	if err != nil || len(dl) != 1 {
		t.Fatalf("dead-letter queue holds %d messages (%v), want 1", len(dl), err)
	}
	reason := aws.ToString(dl[0].MessageAttributes[sqssource.ReasonAttribute].StringValue)
	if aws.ToString(dl[0].Body) != "poison" || !strings.Contains(reason, "cannot parse order") {
		t.Errorf("dead letter %q with reason %q", aws.ToString(dl[0].Body), reason)
	}
	if vis, inflight := depth(t, c, url); vis+inflight != 0 {
		t.Errorf("queue not empty: %d visible, %d in flight", vis, inflight)
	}
	t.Logf("reason: %s", reason)
}

// TestEndToEndDeadLetterMadeToFit: a message that fills the queue's size
// limit, whose handler error is larger still, is dead-lettered at its
// first failure: the copy's reason is cut to what the dead-letter queue
// takes. Its handler runs once and nothing stays behind.
func TestEndToEndDeadLetterMadeToFit(t *testing.T) {
	t.Parallel()
	c := client(t)
	const limit = 2048
	dlqURL, _ := createQueue(t, c, queueSpec{maxSize: limit})
	url, _ := createQueue(t, c, queueSpec{visibility: 5 * time.Second, maxSize: limit})
	body := strings.Repeat("b", limit-len(consumer.IdempotencyKeyAttribute)-len("String")-len("big"))
	if err := send(context.Background(), c, url, false, sourcetest.Outgoing{Body: []byte(body),
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "big"}}); err != nil {
		t.Fatalf("send a message of the queue's limit: %v", err)
	}
	var runs atomic.Int32
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		runs.Add(1)
		return consumer.Result{}, consumer.Permanent(errors.New("malformed: " + strings.Repeat("x", 10000)))
	})
	src := newSource(t, c, url, sqssource.DeadLetterQueue(dlqURL), sqssource.WaitTime(time.Second))
	if err := src.Check(t.Context()); err != nil {
		t.Fatalf("Check of queues of equal limits: %v", err)
	}
	seen := &outcomes{}
	cons, err := consumer.New(src, memstoretest.New(t), h, consumer.WithHooks(seen))
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, cons)
	var dl []types.Message
	testenv.Eventually(t, 30*time.Second, "no dead letter", func() bool {
		got, err := readAll(context.Background(), c, dlqURL, 30*time.Second)
		dl = append(dl, got...)
		return err == nil && len(dl) > 0
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want once", n)
	}
	if len(dl) != 1 || aws.ToString(dl[0].Body) != body {
		t.Fatalf("%d dead letters, want the one message, body intact", len(dl))
	}
	if vis, inflight := depth(t, c, url); vis+inflight != 0 {
		t.Errorf("queue not empty: %d visible, %d in flight", vis, inflight)
	}
}

// TestCheckDeadLetterQueueSmaller: a dead-letter queue that takes smaller
// messages than its source is a misconfiguration Check reports.
func TestCheckDeadLetterQueueSmaller(t *testing.T) {
	t.Parallel()
	c := client(t)
	dlqURL, _ := createQueue(t, c, queueSpec{maxSize: 1024})
	url, _ := createQueue(t, c, queueSpec{maxSize: 4096})
	src := newSource(t, c, url, sqssource.DeadLetterQueue(dlqURL))
	err := src.Check(t.Context())
	if err == nil || !strings.Contains(err.Error(), "MaximumMessageSize") {
		t.Fatalf("Check: %v, want an error naming MaximumMessageSize", err)
	}
}
