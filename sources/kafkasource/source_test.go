package kafkasource_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

func produce(t *testing.T, w *kgo.Writer, msgs ...kgo.Message) {
	t.Helper()
	for len(msgs) > 0 {
		n := min(len(msgs), 1000)
		if err := w.WriteMessages(testenv.Context(t, 30*time.Second), msgs[:n]...); err != nil {
			t.Fatalf("produce: %v", err)
		}
		msgs = msgs[n:]
	}
}

func receiveN(t *testing.T, s consumer.Source, n int) []*consumer.Message {
	t.Helper()
	return grouptest.ReceiveN(t, s, n)
}

// waitCommitted polls until the group's committed offsets equal want.
func waitCommitted(t *testing.T, addr, group, topic string, want []int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, _, err := committed(testenv.Context(t, 5*time.Second), t, addr, group, topic, len(want))
		if err == nil && slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed %v (err %v), want %v", got, err, want)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, under a deadline
	}
}

// misspelt has OnComit where HookKafkaCommit wants OnKafkaCommit.
type misspelt struct{}

func (misspelt) OnComit(context.Context, string, int32, int64) {}

// A hook that implements none of the hook interfaces, a misspelt method's
// for one, is refused rather than never called.
func TestMisspeltHookRefused(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]kafkagroup.Hook{"misspelt": misspelt{}, "nil": nil} {
		s, err := kafkasource.New(context.Background(), []string{"127.0.0.1:1"}, "g", []string{"t"},
			kafkagroup.WithHooks(onCommit(func(context.Context, string, int32, int64) {}), h))
		if !errors.Is(err, kafkagroup.ErrInvalidConfig) || !strings.Contains(err.Error(), "hook") {
			if s != nil {
				_ = s.Close(context.Background())
			}
			t.Errorf("%s hook: New = %v, want ErrInvalidConfig naming the hook", name, err)
		}
	}
}

// A new group under ResetLatest skips what was produced before it joined;
// under the default it reads from the oldest record.
func TestOffsetReset(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic := topicName(t, "in")
	createTopic(t, addr, topic, 1)
	w := writer(t, addr, topic)
	produce(t, w, kgo.Message{Value: []byte("old-0")}, kgo.Message{Value: []byte("old-1")})

	assigned := make(chan struct{}, 1)
	latest := newSource(t, addr, topicName(t, "latest"), []string{topic}, kafkagroup.OffsetReset(kafkagroup.ResetLatest),
		kafkasource.WithDialer(&kgo.Dialer{Timeout: 5 * time.Second}),
		kafkagroup.WithHooks(onRebalance(func(_ context.Context, e kafkagroup.RebalanceEvent) {
			if !e.Revoked {
				select {
				case assigned <- struct{}{}:
				default:
				}
			}
		})))
	select {
	case <-assigned:
	case <-testenv.Context(t, 20*time.Second).Done():
		t.Fatal("no partitions assigned")
	}
	// The fetch loop resolves "latest" when it starts, a moment after the
	// assignment: keep producing until it reads; it must never read an old one.
	stop := make(chan struct{})
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; ; i++ {
			if err := w.WriteMessages(context.Background(), kgo.Message{Value: fmt.Appendf(nil, "new-%d", i)}); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	got := receiveN(t, latest, 1)
	close(stop)
	<-produced
	if !strings.HasPrefix(string(got[0].Body), "new-") || got[0].Origin.Offset < 2 {
		t.Fatalf("ResetLatest read %q at offset %d, want a record produced after joining", got[0].Body, got[0].Origin.Offset)
	}

	earliest := newSource(t, addr, topicName(t, "earliest"), []string{topic})
	if got := receiveN(t, earliest, 1); string(got[0].Body) != "old-0" {
		t.Fatalf("the default read %q first, want old-0", got[0].Body)
	}
}

// Completions out of order commit only the contiguous prefix, and the
// commits reported never go back.
func TestCommitsContiguousPrefix(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	var mu sync.Mutex
	var commits []int64
	s := newSource(t, addr, group, []string{topic}, kafkagroup.WithHooks(onCommit(func(_ context.Context, _ string, _ int32, off int64) {
		mu.Lock()
		commits = append(commits, off)
		mu.Unlock()
	})))
	w := writer(t, addr, topic)
	var out []kgo.Message
	for i := range 10 {
		out = append(out, kgo.Message{Value: fmt.Appendf(nil, "m%d", i)})
	}
	produce(t, w, out...)
	got := receiveN(t, s, 10)
	byOffset := map[int64]*consumer.Message{}
	for _, m := range got {
		byOffset[m.Origin.Offset] = m
		if m.ID != fmt.Sprintf("%s/0/%d", topic, m.Origin.Offset) || m.Origin.System != "kafka" || m.Origin.Destination != topic {
			t.Fatalf("identity: ID %q origin %+v", m.ID, m.Origin)
		}
	}
	ack := func(offs ...int64) {
		for _, o := range offs {
			if err := s.Ack(context.Background(), byOffset[o]); err != nil {
				t.Fatalf("ack %d: %v", o, err)
			}
		}
	}
	ack(2, 3, 5, 9)
	ack(0)
	waitCommitted(t, addr, group, topic, []int64{1})
	ack(1)
	waitCommitted(t, addr, group, topic, []int64{4})
	ack(8, 7, 6)
	waitCommitted(t, addr, group, topic, []int64{4})
	ack(4)
	waitCommitted(t, addr, group, topic, []int64{10})
	if err := s.Ack(context.Background(), byOffset[4]); !errors.Is(err, kafkagroup.ErrNotInFlight) {
		t.Fatalf("second ack: %v, want ErrNotInFlight", err)
	}
	if err := s.Ack(context.Background(), &consumer.Message{ID: "x"}); !errors.Is(err, kafkagroup.ErrForeignMessage) {
		t.Fatalf("foreign ack: %v, want ErrForeignMessage", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.IsSorted(commits) || len(commits) == 0 {
		t.Fatalf("commits %v: not moving forward only", commits)
	}
	for _, off := range commits {
		if off != 1 && off != 4 && off != 10 {
			t.Fatalf("commits %v: %d is not the end of a contiguous acked prefix", commits, off)
		}
	}
}

// Without a dead-letter topic DeadLetter fails with a typed error and the
// message stays in flight, its offset held.
func TestDeadLetterWithoutTopic(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	commits := &commitLog{}
	s := newSource(t, addr, group, []string{topic}, kafkagroup.WithHooks(commits.hook()))
	produce(t, writer(t, addr, topic), kgo.Message{Value: []byte("poison")})
	m := receiveN(t, s, 1)[0]
	if s.Capabilities().DeadLetter {
		t.Fatal("Capabilities declares a dead-letter destination the source lacks")
	}
	err := s.DeadLetter(context.Background(), m, "bad")
	if !errors.Is(err, kafkagroup.ErrNoDeadLetterTopic) || !errors.Is(err, broker.ErrNoDeadLetterDestination) {
		t.Fatalf("DeadLetter: %v, want ErrNoDeadLetterTopic and broker.ErrNoDeadLetterDestination", err)
	}
	offsetHeldUntilAck(t, s, m, commits, addr, group, topic)
}

// A dead-letter produce that fails is an error, never a success: the hook
// and the ok count do not hear of it, and the offset stays held.
func TestDeadLetterProduceFailure(t *testing.T) {
	t.Parallel()
	addr, topic, dlq, group := withDeadLetterTopic(t)
	mp, reader := meterProvider(t)
	var announced atomic.Int32
	commits := &commitLog{}
	s := newSource(t, addr, group, []string{topic}, kafkagroup.DeadLetterTopic(dlq), kafkagroup.WithMeterProvider(mp),
		kafkagroup.WithHooks(onDeadLetter(func(context.Context, string, int32, int64, string) { announced.Add(1) }), commits.hook()))
	deleteTopic(t, addr, dlq)
	produce(t, writer(t, addr, topic), kgo.Message{Value: []byte("poison")})
	m := receiveN(t, s, 1)[0]
	err := s.DeadLetter(testenv.Context(t, 5*time.Second), m, "bad")
	if !errors.Is(err, kafkagroup.ErrDeadLetterFailed) {
		t.Fatalf("DeadLetter to a deleted topic: %v, want ErrDeadLetterFailed", err)
	}
	if errors.Is(err, broker.ErrNoDeadLetterDestination) {
		t.Errorf("a failed produce reported as a missing destination: %v", err)
	}
	if n := announced.Load(); n != 0 {
		t.Errorf("OnKafkaDeadLetter called %d times for a failed produce", n)
	}
	dlqAttr := attribute.String("messaging.destination.name", dlq)
	if n, _ := metricValue(t, reader, "onceq.kafka.dead_letters", dlqAttr, attribute.String("onceq.result", "ok")); n != 0 {
		t.Errorf("%d dead letters counted ok", n)
	}
	if n, _ := metricValue(t, reader, "onceq.kafka.dead_letters", dlqAttr, attribute.String("onceq.result", "error")); n != 1 {
		t.Errorf("%d dead letters counted failed, want 1", n)
	}
	offsetHeldUntilAck(t, s, m, commits, addr, group, topic)
}

// offsetHeldUntilAck shows m, the only message of topic's one partition,
// still in flight after a failed dead letter: it can be acked, and no
// commit the source made before that ack (it commits every 100ms) moved
// past it.
func offsetHeldUntilAck(t *testing.T, s *kafkasource.Source, m *consumer.Message, commits *commitLog, addr, group, topic string) {
	t.Helper()
	early := commits.ack()
	if err := s.Ack(context.Background(), m); err != nil {
		t.Fatalf("ack after a failed dead letter: %v", err)
	}
	waitCommitted(t, addr, group, topic, []int64{1})
	if len(early) > 0 {
		t.Fatalf("offsets %v committed while the message was in flight", early)
	}
}

// commitLog keeps the offsets committed before ack is called.
type commitLog struct {
	mu    sync.Mutex
	acked bool
	early []int64
}

func (l *commitLog) hook() onCommit {
	return func(_ context.Context, _ string, _ int32, off int64) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if !l.acked {
			l.early = append(l.early, off)
		}
	}
}

// ack marks the moment of the ack and returns what was committed before.
func (l *commitLog) ack() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked = true
	return slices.Clone(l.early)
}

// A member that holds messages through a rebalance past its drain timeout
// commits nothing for them; its later acks are dropped and counted, and
// the messages are delivered again, now to whichever member owns them.
func TestLateAcksDropped(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 2)
	var mu sync.Mutex
	var late []int64
	revoked := make(chan kafkagroup.RebalanceEvent, 16)
	mp, reader := meterProvider(t)
	a := newSource(t, addr, group, []string{topic}, kafkagroup.RevokeTimeout(300*time.Millisecond), kafkagroup.WithMeterProvider(mp),
		kafkagroup.WithHooks(
			onLateAck(func(_ context.Context, _ string, _ int32, off int64, _ int32) {
				mu.Lock()
				late = append(late, off)
				mu.Unlock()
			}),
			onRebalance(func(_ context.Context, e kafkagroup.RebalanceEvent) {
				if e.Revoked {
					revoked <- e
				}
			}),
		))
	var out []kgo.Message
	for i := range 10 {
		out = append(out, kgo.Message{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "m%d", i)})
	}
	produce(t, writer(t, addr, topic), out...)
	held := receiveN(t, a, 10)

	b := newSource(t, addr, group, []string{topic})
	var e kafkagroup.RebalanceEvent
	select {
	case e = <-revoked:
	case <-time.After(20 * time.Second):
		t.Fatal("member a saw no revoke")
	}
	if e.Abandoned != 10 || e.Drain < 300*time.Millisecond {
		t.Fatalf("revoke %+v: want 10 abandoned after the 300ms drain", e)
	}
	for _, m := range held {
		if err := a.Ack(context.Background(), m); err != nil {
			t.Fatalf("late ack: %v", err)
		}
	}
	mu.Lock()
	if len(late) != 10 {
		t.Fatalf("late acks counted %d, want 10", len(late))
	}
	mu.Unlock()
	if n, _ := metricValue(t, reader, "onceq.kafka.late_settles", attribute.String("messaging.destination.name", topic)); n != 10 {
		t.Fatalf("onceq.kafka.late_settles %d, want 10", n)
	}

	// Every message comes again, from a or b; each acked once now.
	ctx := testenv.Context(t, 30*time.Second)
	seen := map[string]int{}
	var smu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range []*kafkasource.Source{a, b} {
		wg.Go(func() {
			for ctx.Err() == nil {
				rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				msgs, _ := s.Receive(rctx, 10)
				cancel()
				for _, m := range msgs {
					smu.Lock()
					seen[string(m.Body)]++
					n := len(seen)
					smu.Unlock()
					if err := s.Ack(ctx, m); err != nil {
						t.Errorf("ack: %v", err)
					}
					if n == 10 {
						return
					}
				}
				smu.Lock()
				n := len(seen)
				smu.Unlock()
				if n == 10 {
					return
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != 10 {
		t.Fatalf("redelivered %d of 10: %v", len(seen), seen)
	}
	_, end, err := committed(ctx, t, addr, group, topic, 2)
	if err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, addr, group, topic, end)
}
