package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/memsource"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ledger is a business effect applied only through a memsource.Write, so it
// moves exactly when a COMPLETED commit lands.
type ledger struct {
	mu      sync.Mutex
	applied map[string]int
}

func newLedger() *ledger { return &ledger{applied: map[string]int{}} }

func (l *ledger) write(key string) memstore.Write {
	return memstore.Write{Apply: func() { l.mu.Lock(); l.applied[key]++; l.mu.Unlock() }}
}

func (l *ledger) counts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.applied))
	for k, v := range l.applied {
		out[k] = v
	}
	return out
}

// countingSource records every settle by message ID and checks, at each
// ack, that the message's record is COMPLETED.
type countingSource struct {
	consumer.Source
	t     *testing.T
	store dedup.Store
	mu    sync.Mutex
	acks  map[string]int
	nacks int
}

func (s *countingSource) Ack(ctx context.Context, m *consumer.Message) error {
	if s.store != nil {
		r, err := s.store.Get(ctx, m.IdempotencyKey)
		if err != nil || r.Status != dedup.StatusCompleted {
			s.t.Errorf("ack of %s before its record was COMPLETED: %+v %v", m.ID, r.Status, err)
		}
	}
	s.mu.Lock()
	s.acks[m.ID]++
	s.mu.Unlock()
	return s.Source.Ack(ctx, m)
}

func (s *countingSource) Nack(ctx context.Context, m *consumer.Message, d time.Duration) error {
	s.mu.Lock()
	s.nacks++
	s.mu.Unlock()
	return s.Source.Nack(ctx, m, d)
}

func newCounting(t *testing.T, src consumer.Source, store dedup.Store) *countingSource {
	return &countingSource{Source: src, t: t, store: store, acks: map[string]int{}}
}

// runUntil runs c until done reports true, then cancels and waits.
func runUntil(t *testing.T, c *consumer.Consumer, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			cancel()
			<-errc
			t.Fatal("condition not reached within 60s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestExactlyOnceWithDuplicates(t *testing.T) {
	const total, unique = 10000, 7000
	q := memsourcetest.NewQueue(t, "orders")
	ctx := context.Background()
	for i := range total {
		id := i
		if i >= unique {
			id = (i * 7919) % unique // 30% re-deliveries of earlier messages
		}
		_ = q.Send(ctx, memsource.Outgoing{Body: []byte(fmt.Sprintf(`{"order":%d}`, id)),
			Attributes: map[string]string{"idempotency-key": fmt.Sprintf("order-%d", id)}})
	}
	store := memstoretest.New(t)
	src := newCounting(t, q.Source(), store)
	led := newLedger()
	var calls atomic.Int64
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		calls.Add(1)
		return consumer.Result{Response: []byte("ok"), Writes: []dedup.Write{led.write(m.Attributes["idempotency-key"])}}, nil
	})
	c, err := consumer.New(src, store, h, consumer.Concurrency(16))
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { return q.Stats().Acked == total })

	counts := led.counts()
	if len(counts) != unique {
		t.Fatalf("%d keys took effect, want %d", len(counts), unique)
	}
	for k, n := range counts {
		if n != 1 {
			t.Fatalf("key %s took effect %d times", k, n)
		}
	}
	if calls.Load() != unique {
		t.Fatalf("handler ran %d times for %d unique messages", calls.Load(), unique)
	}
	if len(src.acks) != total {
		t.Fatalf("%d messages acked, want %d", len(src.acks), total)
	}
	for id, n := range src.acks {
		if n != 1 {
			t.Fatalf("message %s acked %d times", id, n)
		}
	}
	if s := q.Stats(); s.Ready+s.Delayed+s.InFlight != 0 {
		t.Fatalf("queue not empty: %+v", s)
	}
}

// failingStore fails its first n (failures) Claims with claimErr, or its
// first n Completes with completeErr: a store outage at one step. A nil
// error leaves that step alone.
type failingStore struct {
	dedup.Store
	failures              atomic.Int32
	claimErr, completeErr error
}

func (s *failingStore) failing(err error) bool { return err != nil && s.failures.Add(-1) >= 0 }

func (s *failingStore) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	if s.failing(s.claimErr) {
		return dedup.Claim{}, s.claimErr
	}
	return s.Store.Claim(ctx, req)
}

func (s *failingStore) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	if s.failing(s.completeErr) {
		return s.completeErr
	}
	return s.Store.Complete(ctx, req)
}

// A store outage at Complete is retried while the lease holds: the
// message is acked only once COMPLETED, the handler does not run again and
// no delivery is spent on the outage.
func TestAckOnlyAfterCompleted(t *testing.T) {
	q := memsourcetest.NewQueue(t, "ack")
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("m1")})
	store := &failingStore{Store: memstoretest.New(t), completeErr: errors.New("injected: connection reset during complete")}
	store.failures.Store(2)
	src := newCounting(t, q.Source(), store)
	led := newLedger()
	var calls atomic.Int32
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		calls.Add(1)
		return consumer.Result{Writes: []dedup.Write{led.write("m1")}}, nil
	})
	c, err := consumer.New(src, store, h, consumer.FailedRetryDelay(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { return q.Stats().Acked == 1 })
	if store.failures.Load() >= 0 {
		t.Fatalf("the store failed fewer than two completes")
	}
	if src.nacks != 0 || calls.Load() != 1 {
		t.Fatalf("%d nacks and %d handler runs: want the outage held through, the handler run once", src.nacks, calls.Load())
	}
	if n := led.counts()["m1"]; n != 1 {
		t.Fatalf("effect applied %d times", n)
	}
}

// rivalGuards are two workers' Guards over one store and handler, to race
// each other for a key.
func rivalGuards(t *testing.T, store dedup.Store, h consumer.Handler, opts ...consumer.GuardOption) (a, b *consumer.Guard) {
	t.Helper()
	var err error
	if a, err = consumer.NewGuard(store, h, opts...); err != nil {
		t.Fatal(err)
	}
	if b, err = consumer.NewGuard(store, h, opts...); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// keyedMessage is a new delivery of message m under idempotency key k.
func keyedMessage() *consumer.Message {
	return &consumer.Message{ID: "m", Body: []byte("x"), Attributes: map[string]string{"idempotency-key": "k"}}
}

type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestFencingAfterLeaseExpiry(t *testing.T) {
	store := memstoretest.New(t)
	clock := &manualClock{now: time.Now()}
	led := newLedger()
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	entered := make(chan int, 2)
	var n atomic.Int32
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		i := int(n.Add(1)) - 1
		entered <- i
		<-gates[i]
		return consumer.Result{Response: []byte("r"), Writes: []dedup.Write{led.write("k")}}, nil
	})
	opts := []consumer.GuardOption{consumer.WithClock(clock), consumer.HandlerTimeout(time.Minute), consumer.LeaseTTL(2 * time.Minute)}
	a, b := rivalGuards(t, store, h, opts...)
	outA, outB := make(chan consumer.Outcome, 1), make(chan consumer.Outcome, 1)
	go func() { outA <- a.Process(context.Background(), keyedMessage()) }()
	<-entered
	clock.Advance(3 * time.Minute) // A's lease is over: B takes the key
	go func() { outB <- b.Process(context.Background(), keyedMessage()) }()
	<-entered
	close(gates[0]) // A finishes first, while B holds the lease
	o := <-outA
	if o.Kind != consumer.LeaseLost || o.Action() == consumer.Ack || !errors.Is(o.Err, dedup.ErrLeaseLost) {
		t.Fatalf("A: %v, action %v (%v); want lease lost, not acked", o.Kind, o.Action(), o.Err)
	}
	if c := led.counts()["k"]; c != 0 {
		t.Fatalf("the fenced worker's effect was applied")
	}
	close(gates[1])
	if o := <-outB; o.Kind != consumer.Processed || o.Attempt != 1 {
		t.Fatalf("B: %v attempt %d (%v), want processed on attempt 1 (a lease taken over is no failed run)", o.Kind, o.Attempt, o.Err)
	}
	if c := led.counts()["k"]; c != 1 {
		t.Fatalf("effect applied %d times", c)
	}
}

func TestDrainTimeoutBoundsRun(t *testing.T) {
	q := memsourcetest.NewQueue(t, "drain")
	for i := range 4 {
		_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte(fmt.Sprint(i))})
	}
	started := make(chan struct{}, 4)
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		started <- struct{}{}
		<-ctx.Done() // a handler that only stops when told
		return consumer.Result{}, ctx.Err()
	})
	store := memstoretest.New(t)
	c, err := consumer.New(q.Source(), store, h, consumer.Concurrency(2), consumer.DrainTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	<-started
	<-started
	cancel()
	begin := time.Now()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 3*time.Second {
		t.Fatalf("Run took %v to return after cancel with a 500ms drain", took)
	}
	s := q.Stats()
	if s.Acked != 0 || s.Ready != 4 || s.InFlight != 0 {
		t.Fatalf("after drain %+v: want all 4 given back, none acked", s)
	}
	// The interrupted claims are re-claimable at once.
	c2, _ := consumer.New(q.Source(), store, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{}, nil
	}))
	runUntil(t, c2, func() bool { return q.Stats().Acked == 4 })
}

func TestDrainLetsInFlightFinish(t *testing.T) {
	q := memsourcetest.NewQueue(t, "finish")
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("slow")})
	started := make(chan struct{})
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		close(started)
		time.Sleep(200 * time.Millisecond)
		return consumer.Result{}, nil
	})
	c, _ := consumer.New(q.Source(), memstoretest.New(t), h)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	<-started
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if s := q.Stats(); s.Acked != 1 {
		t.Fatalf("in-flight message not acked during drain: %+v", s)
	}
}

func TestPanicIsRetriedThenDeadLettered(t *testing.T) {
	q := memsourcetest.NewQueue(t, "panic")
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("once")})
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("always")})
	var onceCalls, alwaysCalls atomic.Int32
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		if string(m.Body) == "always" {
			alwaysCalls.Add(1)
			panic("boom")
		}
		if onceCalls.Add(1) == 1 {
			panic("first time only")
		}
		return consumer.Result{}, nil
	})
	c, _ := consumer.New(q.Source(), memstoretest.New(t), h, consumer.FailedRetryDelay(5*time.Millisecond), consumer.MaxAttempts(3))
	runUntil(t, c, func() bool { s := q.Stats(); return s.Acked == 1 && s.DeadLettered == 1 })
	if onceCalls.Load() != 2 || alwaysCalls.Load() != 3 {
		t.Fatalf("calls once=%d always=%d, want 2 and 3", onceCalls.Load(), alwaysCalls.Load())
	}
	dl := q.DeadLetters()
	if string(dl[0].Message.Body) != "always" || !strings.Contains(dl[0].Reason, "attempts exhausted") || !strings.Contains(dl[0].Reason, "boom") {
		t.Fatalf("dead letter %q: %q", dl[0].Message.Body, dl[0].Reason)
	}
}

func TestBadInputOutcomes(t *testing.T) {
	q := memsourcetest.NewQueue(t, "bad")
	send := func(body, key string) {
		_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte(body), Attributes: map[string]string{"idempotency-key": key}})
	}
	send("not json", "k-bad")  // permanent: dead letter at once
	send("good", "")           // empty key: dead letter
	send("first", "k-reused")  // processed
	send("second", "k-reused") // same key, other body: key reuse
	send("good", string([]byte{0xff, 0xfe}))
	var calls atomic.Int32
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		calls.Add(1)
		if string(m.Body) == "not json" {
			return consumer.Result{}, consumer.Permanent(errors.New("malformed order: not JSON"))
		}
		return consumer.Result{}, nil
	})
	c, _ := consumer.New(q.Source(), memstoretest.New(t), h, consumer.Concurrency(1))
	runUntil(t, c, func() bool { s := q.Stats(); return s.Acked+s.DeadLettered == 5 })
	reasons := map[string]string{}
	for _, d := range q.DeadLetters() {
		reasons[string(d.Message.Body)] = d.Reason
	}
	if !strings.Contains(reasons["not json"], "malformed order") {
		t.Errorf("permanent failure reason %q", reasons["not json"])
	}
	if !strings.Contains(reasons["good"], "empty idempotency key") {
		t.Errorf("empty key reason %q", reasons["good"])
	}
	if !strings.Contains(reasons["second"], "reused") {
		t.Errorf("key reuse reason %q", reasons["second"])
	}
	if s := q.Stats(); s.Acked != 2 || s.DeadLettered != 3 {
		t.Fatalf("stats %+v: want the first reused-key message and the non-UTF-8 key acked", s)
	}
}

func TestInFlightElsewhereIsNotAcked(t *testing.T) {
	q := memsourcetest.NewQueue(t, "elsewhere")
	for range 2 {
		_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("same")})
	}
	store := memstoretest.New(t)
	src := newCounting(t, q.Source(), store)
	var calls atomic.Int32
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		calls.Add(1)
		time.Sleep(300 * time.Millisecond)
		return consumer.Result{Response: []byte("done")}, nil
	})
	var outcomes sync.Map
	c, _ := consumer.New(src, store, h, consumer.Concurrency(2), consumer.PendingRecheck(50*time.Millisecond),
		consumer.WithHooks(outcomeRecorder{&outcomes}))
	runUntil(t, c, func() bool { return q.Stats().Acked == 2 })
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times", calls.Load())
	}
	for _, k := range []consumer.Kind{consumer.Processed, consumer.InFlightElsewhere, consumer.Duplicate} {
		if _, ok := outcomes.Load(k); !ok {
			t.Errorf("no %v outcome seen", k)
		}
	}
}

type outcomeRecorder struct{ m *sync.Map }

func (r outcomeRecorder) OnMessageOutcome(_ context.Context, _ *consumer.Message, o consumer.Outcome, _ time.Duration) {
	r.m.Store(o.Kind, true)
}

// orderedSource declares key ordering over an unordered queue, so the
// consumer alone must serialize.
type orderedSource struct{ *memsource.Source }

func (o orderedSource) Capabilities() consumer.Capabilities {
	c := o.Source.Capabilities()
	c.Ordering = consumer.OrderByKey
	return c
}

func TestKeyOrderUnderConcurrency(t *testing.T) {
	const keys, per = 8, 40
	q := memsourcetest.NewQueue(t, "ordered")
	for i := range per {
		for k := range keys {
			_ = q.Send(context.Background(), memsource.Outgoing{Key: fmt.Sprint(k), Body: []byte(fmt.Sprintf("%d/%d", k, i))})
		}
	}
	var (
		mu      sync.Mutex
		seen    = map[string][]string{}
		running = map[string]int{}
		failed  atomic.Bool
	)
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		mu.Lock()
		running[m.OrderingKey]++
		if running[m.OrderingKey] > 1 {
			t.Errorf("key %s: two messages at once", m.OrderingKey)
		}
		mu.Unlock()
		time.Sleep(100 * time.Microsecond)
		mu.Lock()
		defer mu.Unlock()
		running[m.OrderingKey]--
		if string(m.Body) == "3/5" && failed.CompareAndSwap(false, true) {
			return consumer.Result{}, errors.New("transient failure of a head")
		}
		seen[m.OrderingKey] = append(seen[m.OrderingKey], string(m.Body))
		return consumer.Result{}, nil
	})
	c, _ := consumer.New(orderedSource{q.Source()}, memstoretest.New(t), h, consumer.Concurrency(16),
		consumer.MaxInFlight(64), consumer.FailedRetryDelay(20*time.Millisecond))
	runUntil(t, c, func() bool { return q.Stats().Acked == keys*per })
	mu.Lock()
	defer mu.Unlock()
	for k := range keys {
		key := fmt.Sprint(k)
		if len(seen[key]) != per {
			t.Fatalf("key %s processed %d of %d", key, len(seen[key]), per)
		}
		for i, b := range seen[key] {
			if b != fmt.Sprintf("%d/%d", k, i) {
				t.Fatalf("key %s out of order: %v", key, seen[key])
			}
		}
	}
}

// twoTopicSource delivers each message as if from partition 0 of the topic
// its body names, under partition ordering.
type twoTopicSource struct{ *memsource.Source }

func (s twoTopicSource) Capabilities() consumer.Capabilities {
	c := s.Source.Capabilities()
	c.Ordering = consumer.OrderByPartition
	return c
}

func (s twoTopicSource) Receive(ctx context.Context, max int) ([]*consumer.Message, error) {
	ms, err := s.Source.Receive(ctx, max)
	for _, m := range ms {
		m.Origin.Destination, m.Origin.Partition = string(m.Body), 0
	}
	return ms, err
}

// Partition order holds within a topic, not across topics: partition 0 of
// "a" must not wait for partition 0 of "b".
func TestPartitionOrderIsPerTopic(t *testing.T) {
	q := memsourcetest.NewQueue(t, "topics")
	for _, b := range []string{"a", "b"} {
		_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte(b)})
	}
	bothRunning := make(chan struct{})
	var started sync.WaitGroup
	started.Add(2)
	go func() { started.Wait(); close(bothRunning) }()
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		started.Done()
		select {
		case <-bothRunning:
			return consumer.Result{}, nil
		case <-time.After(10 * time.Second):
			t.Errorf("topic %s: partition 0 of the other topic never ran beside it", m.Body)
			return consumer.Result{}, nil
		}
	})
	c, _ := consumer.New(twoTopicSource{q.Source()}, memstoretest.New(t), h, consumer.Concurrency(4))
	runUntil(t, c, func() bool { return q.Stats().Acked == 2 })
}

func TestConfigurationRefused(t *testing.T) {
	src := memsourcetest.NewQueue(t, "cfg").Source()
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	cases := map[string][]consumer.Option{
		"zero lease":                 {consumer.LeaseTTL(0)},
		"negative lease":             {consumer.LeaseTTL(-time.Second)},
		"lease shorter than timeout": {consumer.HandlerTimeout(time.Minute), consumer.LeaseTTL(time.Minute)},
		"retention under lease":      {consumer.Retention(time.Second)},
		"no workers":                 {consumer.Concurrency(0)},
		"in flight under workers":    {consumer.Concurrency(8), consumer.MaxInFlight(4)},
		"zero attempts":              {consumer.MaxAttempts(0)},
	}
	for name, opts := range cases {
		if _, err := consumer.New(src, memstoretest.New(t), h, opts...); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := consumer.New(windowSource{src}, memstoretest.New(t), h, consumer.Retention(48*time.Hour)); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("retention below the redelivery window: %v", err)
	}
	if _, err := consumer.New(src, oneCallStore{memstoretest.New(t)}, h, consumer.OneRoundTrip()); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("one round trip on a store without it: %v", err)
	}
}

// The retention raised to outlive a source's redelivery window is said once,
// with the value that inspect will show; one set by the caller is not.
func TestRetentionRaisedIsLogged(t *testing.T) {
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{}, nil
	})
	src := windowSource{memsourcetest.NewQueue(t, "q").Source()}
	var logs testenv.LogBuffer
	if _, err := consumer.New(src, memstoretest.New(t), h, consumer.WithLogger(logs.Logger(slog.LevelInfo))); err != nil {
		t.Fatal(err)
	}
	if got := logs.String(); !strings.Contains(got, "retention=97h0m0s") || !strings.Contains(got, "redelivery_window=96h0m0s") {
		t.Errorf("no INFO line with the raised retention: %q", got)
	}
	var setLogs testenv.LogBuffer
	if _, err := consumer.New(src, memstoretest.New(t), h, consumer.Retention(100*time.Hour),
		consumer.WithLogger(setLogs.Logger(slog.LevelInfo))); err != nil {
		t.Fatal(err)
	}
	if got := setLogs.String(); strings.Contains(got, "retention") {
		t.Errorf("a retention set by the caller was reported as raised: %q", got)
	}
}

type windowSource struct{ *memsource.Source }

func (w windowSource) Capabilities() consumer.Capabilities {
	c := w.Source.Capabilities()
	c.RedeliveryWindow = 4 * 24 * time.Hour
	return c
}

// oneCallStore declares no one-round-trip claim.
type oneCallStore struct{ dedup.Store }

func (oneCallStore) Capabilities() dedup.Capabilities { return dedup.Capabilities{} }

// claimCounter counts the claims that reach the store.
type claimCounter struct {
	dedup.Store
	claims atomic.Int64
}

func (c *claimCounter) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, req)
}

func TestCompletedCacheSavesStoreCalls(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []consumer.Option
		claims int64
	}{
		{"cached", nil, 1},
		{"uncached", []consumer.Option{consumer.WithoutCompletedCache()}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := memsourcetest.NewQueue(t, "dups")
			store := &claimCounter{Store: memstoretest.New(t)}
			h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
				return consumer.Result{Response: []byte("r")}, nil
			})
			c, _ := consumer.New(q.Source(), store, h, append(tc.opts, consumer.Concurrency(1))...)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- c.Run(ctx) }()
			for i := range 5 {
				_ = q.Send(ctx, memsource.Outgoing{Body: []byte("same")})
				for q.Stats().Acked <= i {
					time.Sleep(time.Millisecond)
				}
			}
			cancel()
			<-errc
			if n := store.claims.Load(); n != tc.claims {
				t.Fatalf("%d claims reached the store for 1 message and 4 duplicates, want %d", n, tc.claims)
			}
		})
	}
}

type throttleErr struct{}

func (throttleErr) Error() string     { return "ThrottlingException: rate exceeded" }
func (throttleErr) ErrorCode() string { return "ThrottlingException" }

// throttlingStore sheds claims beyond a concurrency it can take, the way a
// table beyond its capacity does, and retries them like a real Store.
type throttlingStore struct {
	dedup.Store
	capacity  int32
	active    atomic.Int32
	throttles atomic.Int64
	observers retry.Observers
}

// Attach keeps the consumer's observer, to tell it of each throttle.
func (s *throttlingStore) Attach(rt dedup.Runtime) {
	s.observers.Add(rt.Observe)
	s.Store.Attach(rt)
}

func (s *throttlingStore) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	var c dedup.Claim
	err := retry.Policy{Initial: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 50}.Do(ctx, func(ctx context.Context) error {
		defer s.active.Add(-1)
		if s.active.Add(1) > s.capacity {
			s.throttles.Add(1)
			return throttleErr{}
		}
		time.Sleep(time.Millisecond)
		var err error
		c, err = s.Store.Claim(ctx, req)
		return err
	}, s.observers.Observe)
	return c, err
}

type limitRecorder struct{ lowest atomic.Int64 }

func (l *limitRecorder) OnPoolConcurrencyLimit(n int) {
	for {
		cur := l.lowest.Load()
		if int64(n) >= cur || l.lowest.CompareAndSwap(cur, int64(n)) {
			return
		}
	}
}

func TestConcurrencyAdaptsToThrottles(t *testing.T) {
	for _, fixed := range []bool{false, true} {
		t.Run(fmt.Sprintf("fixed=%v", fixed), func(t *testing.T) {
			const total = 600
			q := memsourcetest.NewQueue(t, "throttled")
			for i := range total {
				_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte(fmt.Sprint(i))})
			}
			store := &throttlingStore{Store: memstoretest.New(t), capacity: 3}
			led := newLedger()
			h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
				return consumer.Result{Writes: []dedup.Write{led.write(string(m.Body))}}, nil
			})
			rec := &limitRecorder{}
			rec.lowest.Store(1 << 30)
			opts := []consumer.Option{consumer.Concurrency(16), consumer.WithHooks(rec)}
			if fixed {
				opts = append(opts, consumer.WithoutAdaptiveConcurrency())
			}
			c, _ := consumer.New(q.Source(), store, h, opts...)
			runUntil(t, c, func() bool { return q.Stats().Acked == total })
			if n := len(led.counts()); n != total {
				t.Fatalf("%d effects, want %d", n, total)
			}
			lowest := rec.lowest.Load()
			if fixed && lowest != 1<<30 {
				t.Fatalf("fixed concurrency changed its limit to %d", lowest)
			}
			if !fixed && lowest >= 16 {
				t.Fatalf("the limit never dropped under throttling (%d throttles)", store.throttles.Load())
			}
			t.Logf("throttles %d, lowest limit %d", store.throttles.Load(), lowest)
		})
	}
}

// keyedSource declares the record's fingerprint as its default key, as
// the Kafka sources do: the queue, the ordering key and the body.
type keyedSource struct{ consumer.Source }

func (k keyedSource) Capabilities() consumer.Capabilities {
	c := k.Source.Capabilities()
	c.DefaultKey = consumer.KeyFromRecord
	return c
}

func TestSourceSuppliesDefaultKey(t *testing.T) {
	run := func(t *testing.T, opts ...consumer.Option) int64 {
		q := memsourcetest.NewQueue(t, "events")
		ctx := context.Background()
		// One body, three ordering keys: three events by the source's key,
		// one by the body's (the consumer's own default).
		for i := range 3 {
			_ = q.Send(ctx, memsource.Outgoing{Key: fmt.Sprintf("g-%d", i), Body: []byte("same body")})
		}
		var calls atomic.Int64
		h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
			calls.Add(1)
			return consumer.Result{}, nil
		})
		c, err := consumer.New(keyedSource{q.Source()}, memstoretest.New(t), h, append(opts, consumer.Concurrency(1))...)
		if err != nil {
			t.Fatal(err)
		}
		runUntil(t, c, func() bool { return q.Stats().Acked == 3 })
		return calls.Load()
	}
	if n := run(t); n != 3 {
		t.Fatalf("with the source's key the handler ran %d times, want 3", n)
	}
	byBody := consumer.WithKeyFunc(func(m *consumer.Message) (string, error) { return string(m.Body), nil })
	if n := run(t, byBody); n != 1 {
		t.Fatalf("WithKeyFunc must win over the source's key: handler ran %d times, want 1", n)
	}
}

// closeFailingSource is a Source whose final flush fails (SQS: a delete
// batch; Kafka: the last offset commit).
type closeFailingSource struct {
	*memsource.Source
	err error
}

func (s closeFailingSource) Close(ctx context.Context) error {
	_ = s.Source.Close(ctx)
	return s.err
}

// A failed final flush is not swallowed: Run returns it, so a supervisor
// sees it; what it did not ack is delivered again and answered from the
// store as a duplicate.
func TestRunReportsCloseError(t *testing.T) {
	q := memsourcetest.NewQueue(t, "close")
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("m")})
	errFlush := errors.New("final commit failed")
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	c, err := consumer.New(closeFailingSource{q.Source(), errFlush}, memstoretest.New(t), h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	for deadline := time.Now().Add(30 * time.Second); q.Stats().Acked < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the message was never acked")
		}
	}
	cancel()
	if err := <-errc; !errors.Is(err, errFlush) {
		t.Fatalf("Run: %v, want the source's close error", err)
	}
}

// A handler is stopped at HandlerTimeout, with the deadline error, and
// retried; its deadline is HandlerTimeout from its start.
func TestHandlerTimeoutStopsHandler(t *testing.T) {
	const timeout = 300 * time.Millisecond
	q := memsourcetest.NewQueue(t, "timeout")
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("slow")})
	var mu sync.Mutex
	var left []time.Duration
	var errs []error
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		d, ok := ctx.Deadline()
		mu.Lock()
		left = append(left, time.Until(d))
		mu.Unlock()
		if !ok {
			return consumer.Result{}, nil
		}
		if m.Deliveries == 1 {
			<-ctx.Done()
			mu.Lock()
			errs = append(errs, ctx.Err())
			mu.Unlock()
			return consumer.Result{}, ctx.Err()
		}
		return consumer.Result{}, nil
	})
	c, err := consumer.New(q.Source(), memstoretest.New(t), h, consumer.HandlerTimeout(timeout),
		consumer.FailedRetryDelay(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { return q.Stats().Acked == 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(left) != 2 || len(errs) != 1 || !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Fatalf("handler saw deadlines %v and errors %v; want two attempts, the first stopped by its deadline", left, errs)
	}
	for _, l := range left {
		if l > timeout || l < timeout/2 {
			t.Fatalf("handler deadline %v away, want about %v", l, timeout)
		}
	}
}

// fingerprintKey is the stored key of a body sent to the "events" queue
// with no ordering key, under KeyFromRecord: derived from the message.
func fingerprintKey(t *testing.T, body string) string {
	t.Helper()
	fp, err := broker.Fingerprint(&broker.Message{Origin: broker.Origin{Destination: "events"}, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	key, err := dedup.DerivedKey("onceq", fp)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func TestBodyCoveringKeySkipsPayloadHash(t *testing.T) {
	ctx := context.Background()
	store := memstoretest.New(t)
	// A record left by a consumer that stored a payload hash of its own:
	// with a key that covers the body it is a duplicate, not a key reuse.
	oldKey := fingerprintKey(t, "old")
	now := time.Now()
	c0, err := store.Claim(ctx, dedup.ClaimRequest{Key: oldKey, PayloadHash: "some-other-hash", Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !c0.Acquired {
		t.Fatalf("seeding claim: %+v, %v", c0, err)
	}
	if err := store.Complete(ctx, dedup.CompleteRequest{Lease: c0.Lease, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	q := memsourcetest.NewQueue(t, "events")
	_ = q.Send(ctx, memsource.Outgoing{Body: []byte("old")})
	_ = q.Send(ctx, memsource.Outgoing{Body: []byte("new")})
	var kinds sync.Map // body → Kind
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	c, err := consumer.New(keyedSource{q.Source()}, store, h, consumer.Concurrency(1),
		consumer.WithHooks(outcomeByBody{&kinds}))
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { return q.Stats().Acked == 2 })
	if k, _ := kinds.Load("old"); k != consumer.Duplicate {
		t.Fatalf("old record: outcome %v, want Duplicate", k)
	}
	if k, _ := kinds.Load("new"); k != consumer.Processed {
		t.Fatalf("new message: outcome %v, want Processed", k)
	}
	r, err := store.Get(ctx, fingerprintKey(t, "new"))
	if err != nil || r.Status != dedup.StatusCompleted || r.PayloadHash != "" {
		t.Fatalf("new record: %+v, %v; want COMPLETED with no payload hash", r, err)
	}
}

type outcomeByBody struct{ m *sync.Map }

func (r outcomeByBody) OnMessageOutcome(_ context.Context, m *consumer.Message, o consumer.Outcome, _ time.Duration) {
	r.m.Store(string(m.Body), o.Kind)
}
