package faultmatrix_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// Where Kafka differs from SQS: a message is never hidden and made visible
// again, it is held at its offset, and only settled offsets are committed.
// A message given back when Run stops must not be committed past, or it is
// lost to the next member of the group.
func init() {
	cases = append(cases, matrixCase{name: "kafka-missing-business-table", run: kafkaMissingBusinessTable})
}

// kafkaWorld is a case's Kafka: an in-process broker (kfake) with a topic
// of one partition and a dead-letter topic, consumed by one group.
type kafkaWorld struct {
	addr, topic, dlq, group string
	transport               *kgo.Transport
}

func (f *fixture) kafka() *kafkaWorld {
	f.t.Helper()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(1, "orders", "orders-dlq"))
	if err != nil {
		f.t.Fatalf("kfake: %v", err)
	}
	f.t.Cleanup(c.Close)
	k := &kafkaWorld{addr: c.ListenAddrs()[0], topic: "orders", dlq: "orders-dlq", group: "fm-" + f.suffix, transport: &kgo.Transport{}}
	f.t.Cleanup(k.transport.CloseIdleConnections)
	return k
}

// produce writes one record per key to the topic: the key as record key
// and idempotency-key header, the order as value.
func (f *fixture) produce(k *kafkaWorld, keys ...string) {
	f.t.Helper()
	w := &kgo.Writer{Addr: kgo.TCP(k.addr), Topic: k.topic, Transport: k.transport, RequiredAcks: kgo.RequireAll,
		BatchTimeout: time.Millisecond}
	defer w.Close()
	msgs := make([]kgo.Message, len(keys))
	for i, key := range keys {
		msgs[i] = kgo.Message{Key: []byte(key), Value: orderBody(key),
			Headers: []kgo.Header{{Key: consumer.IdempotencyKeyAttribute, Value: []byte(key)}}}
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		f.t.Fatalf("produce: %v", err)
	}
	f.mu.Lock()
	for _, key := range keys {
		f.sent[key] = true
	}
	f.mu.Unlock()
}

// records is how many records a one-partition topic holds.
func (k *kafkaWorld) records(t *testing.T, topic string) int64 {
	t.Helper()
	conn, err := (&kgo.Dialer{Timeout: 5 * time.Second}).DialLeader(context.Background(), "tcp", k.addr, topic, 0)
	if err != nil {
		t.Fatalf("dial %s: %v", topic, err)
	}
	defer conn.Close()
	first, last, err := conn.ReadOffsets()
	if err != nil {
		t.Fatalf("offsets of %s: %v", topic, err)
	}
	return last - first
}

// startKafka runs a consumer over the topic as a member of the group, with
// the dead-letter topic.
func (f *fixture) startKafka(k *kafkaWorld, name string, h consumer.Handler, opts ...consumer.Option) *worker {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src, err := kafkasource.New(ctx, []string{k.addr}, k.group, []string{k.topic}, kafkagroup.DeadLetterTopic(k.dlq),
		kafkagroup.HeartbeatInterval(100*time.Millisecond), kafkagroup.SessionTimeout(6*time.Second),
		kafkagroup.RebalanceTimeout(10*time.Second), kafkasource.JoinGroupBackoff(200*time.Millisecond),
		kafkagroup.CommitInterval(100*time.Millisecond), kafkagroup.RevokeTimeout(2*time.Second), kafkagroup.FetchMaxWait(200*time.Millisecond),
		kafkagroup.WithLogger(testLogger(f.t)))
	if err != nil {
		f.t.Fatalf("kafkasource.New: %v", err)
	}
	f.t.Cleanup(func() { _ = src.Close(context.Background()) })
	return f.run(name, f.newConsumer(name, src, f.store(), h, opts...))
}

// A missing business table on Kafka: Run stops with ErrMisconfigured and
// commits no offset past the records it could not process; the next member
// of the group, once the table exists, processes every one exactly once,
// and none reaches the dead-letter topic.
func kafkaMissingBusinessTable(t *testing.T, f *fixture) string {
	f.idempotencyTable()
	k := f.kafka()
	f.produce(k, keys("order", 5)...)
	w := f.startKafka(k, "first", f.handler(nil))
	misconfigured(t, w.wait(t, 60*time.Second), "ResourceNotFoundException")
	first := f.rec.kinds()
	if f.rec.count(consumer.Misconfigured) == 0 {
		t.Fatalf("outcomes %q; want misconfigured", first)
	}
	f.ledgerTable()
	after := f.startKafka(k, "after-fix", f.handler(nil))
	f.waitEffects(t, 60*time.Second)
	if err := after.stop(); err != nil {
		t.Fatalf("Run after the fix: %v", err)
	}
	if n := k.records(t, k.dlq); n != 0 {
		t.Fatalf("%d records in the dead-letter topic; want none", n)
	}
	return fmt.Sprintf("run 1: %s, Run: ErrMisconfigured; the next member read them again: %s", first, f.rec.kinds())
}
