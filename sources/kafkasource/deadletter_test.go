package kafkasource_test

import (
	"context"
	"errors"
	"strings"
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
	"github.com/onceq/onceq/sources/kafkasource"
)

// createTopicWith creates a one-partition topic with the given configs.
func createTopicWith(t testing.TB, addr, topic string, configs map[string]string) {
	t.Helper()
	c := &kgo.Client{Addr: kgo.TCP(addr), Transport: transport(t)}
	tc := kgo.TopicConfig{Topic: topic, NumPartitions: 1, ReplicationFactor: 1}
	for k, v := range configs {
		tc.ConfigEntries = append(tc.ConfigEntries, kgo.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	resp, err := c.CreateTopics(testenv.Context(t, 10*time.Second), &kgo.CreateTopicsRequest{Topics: []kgo.TopicConfig{tc}})
	if err == nil {
		err = resp.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// TestDeadLetterMadeToFit: a record near the topics' size limit, whose
// handler error is larger than the limit, is dead-lettered at once, its
// reason cut to fit: the handler runs once, the offset is committed and
// the copy carries the value intact.
func TestDeadLetterMadeToFit(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, dlq, group := topicName(t, "in"), topicName(t, "dlq"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	createTopic(t, addr, dlq, 1)
	value := strings.Repeat("v", 1_048_500) // the topic takes it: kafka-go's default batch limit is 1,048,576
	produce(t, writer(t, addr, topic), kgo.Message{Value: []byte(value)})
	var runs atomic.Int32
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		runs.Add(1)
		return consumer.Result{}, consumer.Permanent(errors.New("malformed: " + strings.Repeat("x", 1_100_000)))
	})
	src := newSource(t, addr, group, []string{topic}, kafkagroup.DeadLetterTopic(dlq))
	m := grouptest.Start(t, src, memstoretest.New(t), h)
	waitCommitted(t, addr, group, topic, []int64{1})
	m.Stop(t)
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want once", n)
	}
	recs, err := readTopic(testenv.Context(t, time.Minute), t, addr, dlq) // a bound on a loaded machine, not a wait
	if err != nil || len(recs) != 1 || string(recs[0].Value) != value {
		t.Fatalf("dead-letter topic holds %d records (%v), want the one, value intact", len(recs), err)
	}
	for _, h := range recs[0].Headers {
		if h.Key == kafkagroup.ReasonHeader && (len(h.Value) > 4096 || !strings.HasPrefix(string(h.Value), "malformed")) {
			t.Errorf("reason header of %d bytes, want the start of the reason, at most 4096", len(h.Value))
		}
	}
}

// TestDeadLetterKeptWhenRefused: when the dead-letter topic refuses the
// copy, the record is kept in the store as DEAD_LETTER with its offset,
// the partition's commit moves on, and a copy of the record that comes
// again is not handled again.
func TestDeadLetterKeptWhenRefused(t *testing.T) {
	t.Parallel()
	addr, topic, dlq, group := withDeadLetterTopic(t)
	var runs atomic.Int32
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		if string(m.Body) == "poison" {
			runs.Add(1)
			return consumer.Result{}, consumer.Permanent(errors.New("cannot parse"))
		}
		return consumer.Result{}, nil
	})
	src := newSource(t, addr, group, []string{topic}, kafkagroup.DeadLetterTopic(dlq))
	store := memstoretest.New(t)
	m := grouptest.Start(t, src, store, h)
	w := writer(t, addr, topic)
	produce(t, w, kgo.Message{Value: []byte("fine-1")})
	waitCommitted(t, addr, group, topic, []int64{1}) // started, past Check
	deleteTopic(t, addr, dlq)                        // every dead letter now fails
	produce(t, w, kgo.Message{Value: []byte("poison")}, kgo.Message{Value: []byte("fine-2")})
	waitCommitted(t, addr, group, topic, []int64{3})
	produce(t, w, kgo.Message{Value: []byte("poison")}) // the same record again: a producer's retry
	waitCommitted(t, addr, group, topic, []int64{4})
	m.Stop(t)
	if n := runs.Load(); n != 1 {
		t.Errorf("poison handled %d times, want once", n)
	}
	fp, err := kafkasource.Fingerprint(&consumer.Message{Body: []byte("poison"), Origin: consumer.Origin{System: "kafka", Destination: topic}})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := dedup.DerivedKey("onceq", fp) // a fingerprint is a derived key
	r, err := store.Get(t.Context(), key)
	if err != nil || r.Status != dedup.StatusDeadLetter || !strings.Contains(r.LastError, topic) || !strings.Contains(r.LastError, "cannot parse") {
		t.Fatalf("record %+v (%v), want DEAD_LETTER naming the record and the reason", r, err)
	}
}

// TestCheckDeadLetterTopicSmaller: a dead-letter topic that takes smaller
// records than its source is refused at start.
func TestCheckDeadLetterTopicSmaller(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, dlq := topicName(t, "in"), topicName(t, "dlq")
	createTopic(t, addr, topic, 1)
	createTopicWith(t, addr, dlq, map[string]string{"max.message.bytes": "10000"})
	_, err := kafkasource.New(testenv.Context(t, 10*time.Second), []string{addr}, topicName(t, "group"), []string{topic},
		kafkagroup.DeadLetterTopic(dlq))
	if err == nil || !strings.Contains(err.Error(), "max.message.bytes") {
		t.Fatalf("New with a smaller dead-letter topic: %v, want an error naming max.message.bytes", err)
	}
}
