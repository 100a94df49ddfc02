package kafkasource_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/sourcetest"
)

func TestKeyOrderUnderConcurrency(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	const partitions, keys, per = 6, 40, 50
	createTopic(t, addr, topic, partitions)
	var out []kgo.Message
	for i := range per {
		for k := range keys {
			out = append(out, kgo.Message{Key: fmt.Appendf(nil, "key%02d", k), Value: fmt.Appendf(nil, "key%02d:%03d", k, i)})
		}
	}
	produce(t, writer(t, addr, topic), out...)

	var mu sync.Mutex
	running := map[string]bool{}
	seen := map[string][]int{}
	var maxParallel, parallel atomic.Int64
	eff := grouptest.NewEffects()
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		key, seq, _ := strings.Cut(string(m.Body), ":")
		mu.Lock()
		if running[key] {
			mu.Unlock()
			return consumer.Result{}, consumer.Permanent(fmt.Errorf("key %s ran twice at once", key))
		}
		running[key] = true
		n, _ := strconv.Atoi(seq)
		seen[key] = append(seen[key], n)
		mu.Unlock()
		p := parallel.Add(1)
		for {
			old := maxParallel.Load()
			if p <= old || maxParallel.CompareAndSwap(old, p) {
				break
			}
		}
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // the handler's work, of varied length, so keys interleave
		parallel.Add(-1)
		mu.Lock()
		running[key] = false
		mu.Unlock()
		return consumer.Result{Writes: []dedup.Write{eff.Write(m.IdempotencyKey)}}, nil
	})
	src := newSource(t, addr, group, []string{topic}) // OrderByKey is the default
	if src.Capabilities().Ordering != consumer.OrderByKey {
		t.Fatalf("default ordering %v", src.Capabilities().Ordering)
	}
	m := grouptest.Start(t, sourcetest.Wrap(src), memstoretest.New(t), h, consumer.Concurrency(16), consumer.MaxInFlight(256))
	testenv.Eventually(t, 30*time.Second, "every message", func() bool { return eff.Total() == keys*per })
	m.Stop(t)

	for k := range keys {
		key := fmt.Sprintf("key%02d", k)
		for i, n := range seen[key] {
			if n != i {
				t.Fatalf("key %s ran %v: out of order", key, seen[key])
			}
		}
	}
	if maxParallel.Load() < 2 {
		t.Fatalf("at most %d handlers ran at once: no concurrency", maxParallel.Load())
	}
	t.Logf("max handlers at once: %d", maxParallel.Load())
}

// A message that always fails is retried in place up to MaxAttempts, then
// produced to the dead-letter topic with its reason and origin, and its
// partition goes on: every other message is processed and the committed
// offset reaches the log end.
func TestPoisonMessageToDeadLetterTopic(t *testing.T) {
	t.Parallel()
	addr, topic, dlq, group := withDeadLetterTopic(t)
	var out []kgo.Message
	for i := range 20 {
		body := fmt.Sprintf("m%02d", i)
		if i == 5 {
			body = "poison"
		}
		out = append(out, kgo.Message{Key: []byte("same-key"), Value: []byte(body),
			Headers: []kgo.Header{{Key: consumer.IdempotencyKeyAttribute, Value: []byte(body)}}})
	}
	produce(t, writer(t, addr, topic), out...)

	var attempts atomic.Int64
	eff := grouptest.NewEffects()
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		if string(m.Body) == "poison" {
			attempts.Add(1)
			return consumer.Result{}, errors.New("cannot parse")
		}
		return consumer.Result{Writes: []dedup.Write{eff.Write(m.IdempotencyKey)}}, nil
	})
	var dead atomic.Int64
	src := newSource(t, addr, group, []string{topic}, kafkagroup.DeadLetterTopic(dlq),
		kafkagroup.WithHooks(onDeadLetter(func(context.Context, string, int32, int64, string) { dead.Add(1) })))
	m := grouptest.Start(t, src, memstoretest.New(t), h, consumer.MaxAttempts(3), consumer.FailedRetryDelay(20*time.Millisecond))
	testenv.Eventually(t, 30*time.Second, "the 19 good messages", func() bool { return eff.Total() == 19 })
	waitCommitted(t, addr, group, topic, []int64{20})
	m.Stop(t)

	if n := attempts.Load(); n != 3 {
		t.Fatalf("poison handled %d times, want MaxAttempts 3", n)
	}
	if dead.Load() != 1 {
		t.Fatalf("OnKafkaDeadLetter called %d times", dead.Load())
	}
	recs, err := readTopic(testenv.Context(t, 10*time.Second), t, addr, dlq)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || string(recs[0].Value) != "poison" || string(recs[0].Key) != "same-key" {
		t.Fatalf("dead letters %+v", recs)
	}
	hs := map[string]string{}
	for _, h := range recs[0].Headers {
		hs[h.Key] = string(h.Value)
	}
	if hs[kafkagroup.OriginalTopicHeader] != topic || hs[kafkagroup.OriginalPartitionHeader] != "0" || hs[kafkagroup.OriginalOffsetHeader] != "5" ||
		!strings.Contains(hs[kafkagroup.ReasonHeader], "cannot parse") || hs[consumer.IdempotencyKeyAttribute] != "poison" {
		t.Fatalf("dead-letter headers %v", hs)
	}
}

// Through a pass-through decorator the consumer still keys records by
// Fingerprint: a value produced twice under one record key (a producer's
// retry, at a new offset) is processed once, and the same value under
// another record key is another event. Keyed by the body alone, as without
// the source's default key, all three would be one.
func TestFingerprintThroughWrapper(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 2)
	value := []byte(`{"order":42}`)
	produce(t, writer(t, addr, topic),
		kgo.Message{Key: []byte("k1"), Value: value},
		kgo.Message{Key: []byte("k1"), Value: value},
		kgo.Message{Key: []byte("k2"), Value: value})

	var runs atomic.Int64
	eff := grouptest.NewEffects()
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		runs.Add(1)
		return consumer.Result{Writes: []dedup.Write{eff.Write(m.OrderingKey)}}, nil
	})
	src := sourcetest.Wrap(newSource(t, addr, group, []string{topic}))
	m := grouptest.Start(t, src, memstoretest.New(t), h)
	testenv.Eventually(t, 30*time.Second, "all three records settled", func() bool { return src.Acks() == 3 })
	m.Stop(t)

	n := eff.Counts()
	if n["k1"] != 1 || n["k2"] != 1 || runs.Load() != 2 {
		t.Fatalf("effects %v after %d handler runs; want k1 and k2 once each, from 2 runs", n, runs.Load())
	}
}
