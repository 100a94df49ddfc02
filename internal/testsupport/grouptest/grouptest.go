// Package grouptest runs consumer-group members in the tests of onceq's
// Kafka sources, and counts their effects, so that a test can prove each
// effect happened exactly once.
package grouptest

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

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/sourcetest"
)

// Member is one consumer.Consumer over its own Source, run until Stop.
type Member struct {
	cancel context.CancelFunc
	done   chan error
}

// Start runs a consumer over src and store, keyed by the source's default
// key; the test's end stops it.
func Start(t *testing.T, src consumer.Source, store *memstore.Store, h consumer.Handler, opts ...consumer.Option) *Member {
	t.Helper()
	base := []consumer.Option{consumer.PendingRecheck(100 * time.Millisecond),
		consumer.DrainTimeout(5 * time.Second), consumer.WithLogger(testenv.Logger(t)), consumer.WithoutDeadLetters()}
	c, err := consumer.New(src, store, h, append(base, opts...)...)
	if err != nil {
		t.Fatalf("consumer.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Member{cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- c.Run(ctx) }()
	t.Cleanup(func() { m.Stop(t) })
	return m
}

// Stop cancels the member and waits for Run, which closes the Source.
func (m *Member) Stop(t *testing.T) {
	if m.cancel == nil {
		return
	}
	m.cancel()
	m.cancel = nil
	select {
	case err := <-m.done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("member did not stop")
	}
}

// Effects counts, per idempotency key, the writes committed with COMPLETED.
type Effects struct {
	mu    sync.Mutex
	n     map[string]int
	total atomic.Int64
}

// NewEffects returns an empty count.
func NewEffects() *Effects { return &Effects{n: map[string]int{}} }

// Write is the business write of key's effect, for a handler's Result.
func (e *Effects) Write(key string) memstore.Write {
	return memstore.Write{Apply: func() {
		e.mu.Lock()
		e.n[key]++
		e.mu.Unlock()
		e.total.Add(1)
	}}
}

// Total counts the effects applied.
func (e *Effects) Total() int64 { return e.total.Load() }

// Counts returns a copy of the effects per key.
func (e *Effects) Counts() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.n))
	for k, v := range e.n {
		out[k] = v
	}
	return out
}

// ExactlyOnce fails the test unless exactly want keys had an effect, each
// exactly once.
func (e *Effects) ExactlyOnce(t *testing.T, want int) {
	t.Helper()
	counts := e.Counts()
	if len(counts) != want {
		t.Fatalf("%d keys had an effect, want %d", len(counts), want)
	}
	for k, n := range counts {
		if n != 1 {
			t.Fatalf("key %s: effect applied %d times", k, n)
		}
	}
}

// TopicName is a topic (or group) name unique per test and call.
func TopicName(t testing.TB, suffix string) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '-'
	}, t.Name())
	return fmt.Sprintf("%s-%08x-%s", name, rand.Uint32(), suffix)
}

// ackCounter counts successful acks.
type ackCounter struct{ n atomic.Int64 }

func (a *ackCounter) OnMessageSettled(_ context.Context, _ *consumer.Message, act consumer.Action, err error) {
	if act == consumer.Ack && err == nil {
		a.n.Add(1)
	}
}

// TimeSource drives src alone, Receive and Ack with no consumer or store,
// until records are acked, and returns the time since start; it closes
// src after.
func TimeSource(b *testing.B, start time.Time, src consumer.Source, records int) time.Duration {
	ctx := context.Background()
	for n := 0; n < records; {
		msgs, err := src.Receive(ctx, 512)
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range msgs {
			if err := src.Ack(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
		n += len(msgs)
	}
	took := time.Since(start)
	if err := src.Close(ctx); err != nil {
		b.Fatal(err)
	}
	return took
}

// TimeConsumer runs the consumer over src with the memory store and a
// no-op handler (16 workers, 512 in flight) until records messages are
// acked, then stops it; it returns the time from start, which the caller
// takes before making src, to the last ack.
func TimeConsumer(b *testing.B, start time.Time, src consumer.Source, records int) time.Duration {
	acks := &ackCounter{}
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{}, nil
	})
	c, err := consumer.New(src, memstoretest.New(b), h, consumer.Concurrency(16), consumer.MaxInFlight(512),
		consumer.WithHooks(acks), consumer.WithoutDeadLetters())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for acks.n.Load() < int64(records) {
		time.Sleep(200 * time.Microsecond)
	}
	took := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return took
}

// Hook adapters: a func of a Kafka hook's method's type (the hook
// interfaces are shared by both Kafka sources).
type (
	OnKafkaCommit     func(ctx context.Context, topic string, partition int32, offset int64)
	OnKafkaLateAck    func(ctx context.Context, topic string, partition int32, offset int64, generation int32)
	OnKafkaRebalance  func(ctx context.Context, e kafkagroup.RebalanceEvent)
	OnKafkaDeadLetter func(ctx context.Context, topic string, partition int32, offset int64, reason string)
)

// OnKafkaCommit calls f.
func (f OnKafkaCommit) OnKafkaCommit(ctx context.Context, topic string, p int32, off int64) {
	f(ctx, topic, p, off)
}

// OnKafkaLateAck calls f.
func (f OnKafkaLateAck) OnKafkaLateAck(ctx context.Context, topic string, p int32, off int64, gen int32) {
	f(ctx, topic, p, off, gen)
}

// OnKafkaRebalance calls f.
func (f OnKafkaRebalance) OnKafkaRebalance(ctx context.Context, e kafkagroup.RebalanceEvent) {
	f(ctx, e)
}

// OnKafkaDeadLetter calls f.
func (f OnKafkaDeadLetter) OnKafkaDeadLetter(ctx context.Context, topic string, p int32, off int64, reason string) {
	f(ctx, topic, p, off, reason)
}

// DeadLetter is what the conformance suite reads of a dead-letter record.
// H is either client's header type: kafka-go's Header and franz-go's
// RecordHeader are both this struct.
func DeadLetter[H ~struct {
	Key   string
	Value []byte
}](value []byte, headers []H) sourcetest.DeadLetter {
	d := sourcetest.DeadLetter{Body: value, Attributes: map[string]string{}}
	for _, h := range headers {
		kv := struct {
			Key   string
			Value []byte
		}(h)
		d.Attributes[kv.Key] = string(kv.Value)
	}
	d.Reason = d.Attributes[kafkagroup.ReasonHeader]
	return d
}

// CloseAtEnd closes src when the test ends, within 20 s; an error other
// than the end of that wait fails the test.
func CloseAtEnd(t testing.TB, src consumer.Source) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := src.Close(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("close: %v", err)
		}
	})
}

// ReceiveN receives n messages from s, without settling them, or fails the
// test after 20 s.
func ReceiveN(t *testing.T, s consumer.Source, n int) []*consumer.Message {
	t.Helper()
	ctx := testenv.Context(t, 20*time.Second)
	var got []*consumer.Message
	for len(got) < n {
		msgs, err := s.Receive(ctx, n-len(got))
		if err != nil {
			t.Fatalf("receive after %d of %d: %v", len(got), n, err)
		}
		got = append(got, msgs...)
	}
	return got
}
