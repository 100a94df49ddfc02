package kafkacontrol_test

import (
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// TestMain checks that no goroutine outlives the tests but the kfake
// broker's own run loop, which a control function a test slept (to hold a
// rebalance) can leave parked on kfake's lock after the cluster closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).run"))
}

// controlled is a one-broker kfake cluster on a loopback port, closed when
// the test ends, for a test that controls what the broker answers.
func controlled(t testing.TB) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.Ports(0))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// transport is a kafka-go transport whose idle connections are closed when
// the test ends, so no connection goroutine outlives it.
func transport(t testing.TB) *kgo.Transport {
	tr := &kgo.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func topicName(t testing.TB, suffix string) string { return grouptest.TopicName(t, suffix) }

func createTopic(t testing.TB, addr, topic string, partitions int) {
	t.Helper()
	c := &kgo.Client{Addr: kgo.TCP(addr), Transport: transport(t)}
	resp, err := c.CreateTopics(testenv.Context(t, 10*time.Second), &kgo.CreateTopicsRequest{Topics: []kgo.TopicConfig{
		{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1},
	}})
	if err == nil {
		err = resp.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// writer produces to topic, acknowledged by the broker.
func writer(t testing.TB, addr, topic string) *kgo.Writer {
	w := &kgo.Writer{Addr: kgo.TCP(addr), Topic: topic, Transport: transport(t), Balancer: &kgo.Hash{},
		RequiredAcks: kgo.RequireAll, BatchTimeout: time.Millisecond, BatchSize: 1000}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func produce(t *testing.T, w *kgo.Writer, msgs ...kgo.Message) {
	t.Helper()
	if err := w.WriteMessages(testenv.Context(t, 30*time.Second), msgs...); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

func receiveN(t *testing.T, s consumer.Source, n int) []*consumer.Message {
	t.Helper()
	return grouptest.ReceiveN(t, s, n)
}

// fastGroup makes rebalances take well under a second on kfake.
func fastGroup() []kafkasource.Option {
	return []kafkasource.Option{kafkagroup.HeartbeatInterval(100 * time.Millisecond), kafkagroup.SessionTimeout(6 * time.Second),
		kafkagroup.RebalanceTimeout(10 * time.Second), kafkasource.JoinGroupBackoff(200 * time.Millisecond)}
}

// newSource is a member of group that has joined it, closed when the test
// ends.
func newSource(t testing.TB, addr, group string, topics []string) *kafkasource.Source {
	t.Helper()
	opts := append(fastGroup(), kafkagroup.CommitInterval(100*time.Millisecond), kafkagroup.RevokeTimeout(2*time.Second),
		kafkagroup.FetchMaxWait(200*time.Millisecond), kafkagroup.WithLogger(testenv.Logger(t)))
	s, err := kafkasource.New(testenv.Context(t, 10*time.Second), []string{addr}, group, topics, opts...)
	if err != nil {
		t.Fatalf("kafkasource.New: %v", err)
	}
	grouptest.CloseAtEnd(t, s)
	grouptest.Join(t, s)
	return s
}
