package sharesource_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource/sharesource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

func produceN(t *testing.T, addr, topic string, n int) {
	t.Helper()
	w := producer(t, addr, topic)
	ctx := testenv.Context(t, 20*time.Second)
	for i := range n {
		if err := w.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "r-%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func receiveN(t *testing.T, ctx context.Context, src *sharesource.Source, n int) []*broker.Message {
	t.Helper()
	var msgs []*broker.Message
	for len(msgs) < n {
		got, err := src.Receive(ctx, n-len(msgs))
		if err != nil {
			t.Fatalf("receive after %d of %d: %v", len(msgs), n, err)
		}
		msgs = append(msgs, got...)
	}
	return msgs
}

// A second settle, a settle of another source's message, and a settle of
// a message without a handle are refused with a typed error.
func TestReviewDoubleAndForeignSettles(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	produceN(t, addr, topic, 1)
	src := newSource(t, addr, group, topic, sharesource.Members(1))
	other := newSource(t, addr, topicName(t, "other"), topic, sharesource.Members(1))
	ctx := testenv.Context(t, 30*time.Second)
	m := receiveN(t, ctx, src, 1)[0]
	for name, err := range map[string]error{
		"extend other": other.Extend(ctx, m, time.Second),
		"ack other":    other.Ack(ctx, m),
		"ack nil":      src.Ack(ctx, &broker.Message{ID: "x"}),
		"nack nil":     src.Nack(ctx, &broker.Message{ID: "x"}, time.Second),
		"dl nil":       src.DeadLetter(ctx, &broker.Message{ID: "x"}, "r"),
	} {
		if !errors.Is(err, kafkagroup.ErrForeignMessage) {
			t.Errorf("%s: %v, want ErrForeignMessage", name, err)
		}
	}
	if err := src.Ack(ctx, m); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"ack":    src.Ack(ctx, m),
		"nack":   src.Nack(ctx, m, 0),
		"nack d": src.Nack(ctx, m, time.Hour),
		"dl":     src.DeadLetter(ctx, m, "r"),
		"extend": src.Extend(ctx, m, time.Second),
	} {
		if !errors.Is(err, kafkagroup.ErrNotInFlight) {
			t.Errorf("%s after ack: %v, want ErrNotInFlight", name, err)
		}
	}
}

// An Ack after Close reaches no broker: leaving the group released the
// record. It must say so, not report success, and the record comes again.
func TestReviewAckAfterCloseRefused(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	produceN(t, addr, topic, 2)
	src := newSource(t, addr, group, topic, sharesource.Members(1))
	ctx := testenv.Context(t, 40*time.Second)
	msgs := receiveN(t, ctx, src, 2)
	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := src.Ack(ctx, msgs[0]); !errors.Is(err, broker.ErrSourceClosed) {
		t.Errorf("ack after close: %v, want ErrSourceClosed", err)
	}
	if err := src.DeadLetter(ctx, msgs[1], "r"); !errors.Is(err, broker.ErrSourceClosed) {
		t.Errorf("reject after close: %v, want ErrSourceClosed", err)
	}
	if _, err := src.Receive(ctx, 1); !errors.Is(err, broker.ErrSourceClosed) {
		t.Errorf("receive after close: %v", err)
	}
	again := newSource(t, addr, group, topic, sharesource.Members(1))
	for _, m := range receiveN(t, ctx, again, 2) {
		if m.Deliveries != 2 {
			t.Errorf("%s: delivery %d, want 2", m.Body, m.Deliveries)
		}
		if err := again.Ack(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

// Receive with max below 1 is bad input: an error at once, not a spin on
// its own wake-up until ctx ends.
func TestReviewReceiveMaxBelowOne(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	produceN(t, addr, topic, 2)
	src := newSource(t, addr, group, topic, sharesource.Members(1))
	ctx := testenv.Context(t, 30*time.Second)
	first := receiveN(t, ctx, src, 1) // the other waits, polled
	for _, max := range []int{0, -1} {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, err := src.Receive(c, max)
		cancel()
		if len(got) > 0 || err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Receive(max %d): %d messages, %v; want an error at once", max, len(got), err)
		}
	}
	rest := receiveN(t, ctx, src, 1)
	if string(rest[0].Body) == string(first[0].Body) {
		t.Fatalf("%s delivered twice", rest[0].Body)
	}
}

// A Nack delay far beyond the lock: Close releases the record at once, and
// the next member gets it as delivery 2.
func TestReviewNackHugeDelayThenClose(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	produceN(t, addr, topic, 1)
	src := newSource(t, addr, group, topic, sharesource.Members(1))
	ctx := testenv.Context(t, 40*time.Second)
	m := receiveN(t, ctx, src, 1)[0]
	if err := src.Nack(ctx, m, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	again := newSource(t, addr, group, topic, sharesource.Members(1))
	got := receiveN(t, ctx, again, 1)[0]
	if got.Deliveries != 2 {
		t.Fatalf("delivery %d, want 2", got.Deliveries)
	}
}

// A Nack delay longer than the lock: held and renewed, released only after
// it, then delivered as delivery 2 (not 3: the lock did not run out).
func TestReviewNackDelayBeyondLock(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	produceN(t, addr, topic, 1)
	src := newSource(t, addr, group, topic, sharesource.Members(2))
	ctx := testenv.Context(t, 40*time.Second)
	m := receiveN(t, ctx, src, 1)[0]
	delay := testLock * 3 / 2
	start := time.Now()
	if err := src.Nack(ctx, m, delay); err != nil {
		t.Fatal(err)
	}
	got := receiveN(t, ctx, src, 1)[0]
	if el := time.Since(start); el < delay || got.Deliveries != 2 {
		t.Fatalf("redelivered after %v (delay %v) as delivery %d, want 2", el, delay, got.Deliveries)
	}
	if err := src.Ack(ctx, got); err != nil {
		t.Fatal(err)
	}
}

// A cancelled Receive returns ctx's error and loses nothing; concurrent
// Receive callers get every record once.
func TestReviewCancelledAndConcurrentReceive(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 2)
	src := newSource(t, addr, group, topic, sharesource.Members(3), sharesource.MaxRecords(3))
	ctx := testenv.Context(t, 40*time.Second)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := src.Receive(cctx, 10)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive on an empty topic: %v", err)
	}
	const n = 40
	produceN(t, addr, topic, n)
	var mu sync.Mutex
	seen := map[string]int{}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for rctx.Err() == nil {
				got, err := src.Receive(rctx, 2)
				if err != nil {
					return
				}
				mu.Lock()
				for _, m := range got {
					seen[string(m.Body)]++
					if m.Deliveries != 1 {
						t.Errorf("%s: delivery %d", m.Body, m.Deliveries)
					}
				}
				if len(seen) == n {
					stop()
				}
				mu.Unlock()
				for _, m := range got {
					if err := src.Ack(ctx, m); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d distinct records, want %d", len(seen), n)
	}
	for b, c := range seen {
		if c != 1 {
			t.Errorf("%s received %d times", b, c)
		}
	}
}

// The delivery-count check at its edges: need == limit passes, one more is
// refused.
func TestReviewDeliveryLimitBoundary(t *testing.T) {
	t.Parallel()
	addr := cluster(t) // limit 10, lock 4s
	topic := topicName(t, "in")
	createTopic(t, addr, topic, 1)
	ctx := testenv.Context(t, 30*time.Second)
	for _, c := range []struct {
		attempts int
		lease    time.Duration
		need     int
	}{
		{6, 2 * testLock, 10},
		{7, 2 * testLock, 11},
		{6, 2*testLock + time.Nanosecond, 12},
		{10, 0, 10},
		{11, 0, 11},
		{8, time.Nanosecond, 10},
		{9, time.Nanosecond, 11},
	} {
		src, err := sharesource.New(ctx, []string{addr}, topicName(t, "g"), []string{topic}, sharesource.CheckAttempts(c.attempts, c.lease))
		var le *sharesource.DeliveryLimitError
		switch {
		case c.need <= 10 && err != nil:
			t.Errorf("attempts %d lease %v: %v, want accepted", c.attempts, c.lease, err)
		case c.need > 10 && (!errors.As(err, &le) || le.Need != c.need || le.Limit != 10):
			t.Errorf("attempts %d lease %v: %v, want a DeliveryLimitError needing %d", c.attempts, c.lease, err, c.need)
		}
		if src != nil {
			if err := src.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, opt := range []sharesource.Option{sharesource.CheckAttempts(-1, time.Minute), sharesource.CheckAttempts(3, -time.Second),
		sharesource.Members(-1), sharesource.MaxRecords(-1), sharesource.RecordLock(-time.Second)} {
		if _, err := sharesource.New(ctx, []string{addr}, topicName(t, "g"), []string{topic}, opt); !errors.Is(err, kafkagroup.ErrInvalidConfig) {
			t.Errorf("negative option: %v, want ErrInvalidConfig", err)
		}
	}
}

// DeadLetter to a topic deleted after New: ErrDeadLetterFailed, the record
// still held, and a Nack gives it back as delivery 2.
func TestReviewDeadLetterTopicGone(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, dlq, group := topicName(t, "in"), topicName(t, "dlq"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	createTopic(t, addr, dlq, 1)
	produceN(t, addr, topic, 1)
	src := newSource(t, addr, group, topic, sharesource.Members(1), sharesource.DeadLetterTopic(dlq))
	ctx := testenv.Context(t, 40*time.Second)
	m := receiveN(t, ctx, src, 1)[0]
	deleteTopic(ctx, t, addr, dlq)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := src.DeadLetter(dctx, m, "bad")
	cancel()
	if !errors.Is(err, kafkagroup.ErrDeadLetterFailed) {
		t.Fatalf("dead letter to a deleted topic: %v, want ErrDeadLetterFailed", err)
	}
	if err := src.Nack(ctx, m, 0); err != nil {
		t.Fatalf("nack after a failed dead letter: %v", err)
	}
	if got := receiveN(t, ctx, src, 1)[0]; got.Deliveries != 2 {
		t.Fatalf("after the nack: delivery %d, want 2", got.Deliveries)
	}
}

func deleteTopic(ctx context.Context, t *testing.T, addr, topic string) {
	t.Helper()
	req := kmsg.NewPtrDeleteTopicsRequest()
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = &topic
	req.Topics = append(req.Topics, rt)
	req.TopicNames = []string{topic}
	resp, err := req.RequestWith(ctx, client(t, addr))
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("delete topic %s: %v", topic, err)
	}
}

// RecordLock is for brokers that cannot be asked: where they say their
// lock, theirs is the lock the records have. A RecordLock longer than the
// brokers' would make every polled record look prefetched (less than half
// of the assumed lock left), released at each poll until the
// delivery-count limit archives it unprocessed.
func TestReviewBrokerLockWinsOverRecordLock(t *testing.T) {
	t.Parallel()
	addr := cluster(t) // lock 4s
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	produceN(t, addr, topic, 1)
	src := newSource(t, addr, group, topic, sharesource.Members(1), sharesource.RecordLock(time.Minute))
	if src.Lock() != testLock || src.Capabilities().DeliveryTimeout != testLock/2 {
		t.Errorf("lock %v, delivery timeout %v: want the broker's %v and half", src.Lock(), src.Capabilities().DeliveryTimeout, testLock)
	}
	ctx := testenv.Context(t, 30*time.Second)
	m := receiveN(t, ctx, src, 1)[0]
	if m.Deliveries != 1 {
		t.Fatalf("delivery %d, want 1: the record went back to the group unreceived", m.Deliveries)
	}
	if err := src.Ack(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// A Nack on a record's last delivery makes the broker archive it, unrun:
// the source must not let that pass silently.
func TestReviewReleaseOnLastDeliveryLogged(t *testing.T) {
	t.Parallel()
	addr := cluster(t) // limit 10
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	produceN(t, addr, topic, 1)
	logs := &warnings{}
	src := newSource(t, addr, group, topic, sharesource.Members(1), sharesource.WithLogger(slog.New(logs)))
	ctx := testenv.Context(t, 30*time.Second)
	for i := 1; i <= 10; i++ {
		m := receiveN(t, ctx, src, 1)[0]
		if m.Deliveries != i {
			t.Fatalf("delivery %d, want %d", m.Deliveries, i)
		}
		if got := logs.count(); got != 0 {
			t.Fatalf("%d warnings before the last delivery's release", got)
		}
		if err := src.Nack(ctx, m, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := logs.count(); got != 1 {
		t.Fatalf("%d warnings after releasing the last delivery, want 1", got)
	}
}

type warnings struct {
	mu sync.Mutex
	n  int
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnings) WithGroup(string) slog.Handler            { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && strings.Contains(r.Message, "last delivery") {
		w.mu.Lock()
		w.n++
		w.mu.Unlock()
	}
	return nil
}

func (w *warnings) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// Close ends a waiting Receive with ErrSourceClosed; a Close whose ctx has
// already ended returns its error and the shutdown goes on, so a second
// Close finds it done.
func TestReviewCloseDuringReceive(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	src := newSource(t, addr, group, topic, sharesource.Members(2))
	ctx := testenv.Context(t, 30*time.Second)
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := src.Receive(ctx, 5)
			errs <- err
		}()
	}
	dead, cancel := context.WithCancel(ctx)
	cancel()
	if err := src.Close(dead); !errors.Is(err, context.Canceled) {
		t.Fatalf("close with an ended ctx: %v", err)
	}
	for range 3 {
		if err := <-errs; !errors.Is(err, broker.ErrSourceClosed) {
			t.Fatalf("receive during close: %v, want ErrSourceClosed", err)
		}
	}
	if err := src.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}
}
