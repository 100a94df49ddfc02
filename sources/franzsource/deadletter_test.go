package franzsource_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// createTopicWith creates a one-partition topic with the given configs.
func createTopicWith(t testing.TB, addr, topic string, configs map[string]string) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
	for k, v := range configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testenv.Context(t, 10*time.Second), client(t, addr))
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

func deleteTopic(t testing.TB, addr, topic string) {
	t.Helper()
	req := kmsg.NewPtrDeleteTopicsRequest()
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics, req.TopicNames = append(req.Topics, rt), []string{topic}
	resp, err := req.RequestWith(testenv.Context(t, 10*time.Second), client(t, addr))
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("delete topic %s: %v", topic, err)
	}
}

func waitCommitted(t *testing.T, addr, group, topic string, want []int64) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, "commit", func() bool {
		got, _, err := committed(testenv.Context(t, 5*time.Second), addr, group, topic)
		return err == nil && slices.Equal(got, want)
	})
}

// TestDeadLetterMadeToFit: a record over franz-go's default producer batch
// limit (1,000,012 bytes) but within the topics' (1,048,588), whose
// handler error is larger than either, is dead-lettered at once, its
// reason cut to fit: the handler runs once, the offset is committed and
// the copy carries the value intact.
func TestDeadLetterMadeToFit(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, dlq, group := topicName(t, "in"), topicName(t, "dlq"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	createTopic(t, addr, dlq, 1)
	value := strings.Repeat("v", 1_040_000)
	produce(t, client(t, addr, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(1_048_588)), &kgo.Record{Value: []byte(value)})
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
	recs, err := readTopic(testenv.Context(t, 10*time.Second), t, addr, dlq)
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
	addr := cluster(t)
	topic, dlq, group := topicName(t, "in"), topicName(t, "dlq"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	createTopic(t, addr, dlq, 1)
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
	p := producer(t, addr, topic)
	produce(t, p, &kgo.Record{Value: []byte("fine-1")})
	waitCommitted(t, addr, group, topic, []int64{1}) // started, past Check
	deleteTopic(t, addr, dlq)                        // every dead letter now fails
	produce(t, p, &kgo.Record{Value: []byte("poison")}, &kgo.Record{Value: []byte("fine-2")})
	waitCommitted(t, addr, group, topic, []int64{3})
	produce(t, p, &kgo.Record{Value: []byte("poison")}) // the same record again: a producer's retry
	waitCommitted(t, addr, group, topic, []int64{4})
	m.Stop(t)
	if n := runs.Load(); n != 1 {
		t.Errorf("poison handled %d times, want once", n)
	}
	fp, err := franzsource.Fingerprint(&consumer.Message{Body: []byte("poison"), Origin: consumer.Origin{System: "kafka", Destination: topic}})
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
	_, err := franzsource.New(testenv.Context(t, 10*time.Second), []string{addr}, topicName(t, "group"), []string{topic},
		kafkagroup.DeadLetterTopic(dlq))
	if err == nil || !strings.Contains(err.Error(), "max.message.bytes") {
		t.Fatalf("New with a smaller dead-letter topic: %v, want an error naming max.message.bytes", err)
	}
}
