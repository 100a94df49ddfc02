package kafkasource_test

import (
	"context"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"go.uber.org/goleak"

	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// TestMain checks for leaked goroutines once all tests are done, which
// lets tests run in parallel.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster is the Kafka broker the tests share, or skips (fails under CI).
// Each test names its own topics and groups. The tests that steer what the
// broker answers need franz-go's in-process broker, and live in a module
// that may require franz-go, so that this one does not.
func cluster(t testing.TB) string { return testenv.KafkaBrokers(t) }

// transport is a kafka-go transport whose idle connections are closed when
// the test ends, so no connection goroutine outlives it.
func transport(t testing.TB) *kgo.Transport {
	tr := &kgo.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// topicName is unique per test and call.
func topicName(t testing.TB, suffix string) string { return grouptest.TopicName(t, suffix) }

func createTopic(t testing.TB, addr, topic string, partitions int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &kgo.Client{Addr: kgo.TCP(addr), Transport: transport(t)}
	resp, err := c.CreateTopics(ctx, &kgo.CreateTopicsRequest{Topics: []kgo.TopicConfig{
		{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1},
	}})
	if err == nil {
		err = resp.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// withDeadLetterTopic starts a cluster with a one-partition topic and a
// dead-letter topic, and names a group.
func withDeadLetterTopic(t testing.TB) (addr, topic, dlq, group string) {
	t.Helper()
	addr = cluster(t)
	topic, dlq, group = topicName(t, "in"), topicName(t, "dlq"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	createTopic(t, addr, dlq, 1)
	return addr, topic, dlq, group
}

func deleteTopic(t testing.TB, addr, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &kgo.Client{Addr: kgo.TCP(addr), Transport: transport(t)}
	resp, err := c.DeleteTopics(ctx, &kgo.DeleteTopicsRequest{Topics: []string{topic}})
	if err == nil {
		err = resp.Errors[topic]
	}
	if err != nil {
		t.Fatalf("delete topic %s: %v", topic, err)
	}
}

// writer produces to topic, partitioning by key like any Kafka producer.
func writer(t testing.TB, addr, topic string) *kgo.Writer {
	w := &kgo.Writer{
		Addr: kgo.TCP(addr), Topic: topic, Transport: transport(t),
		Balancer: &kgo.Hash{}, RequiredAcks: kgo.RequireAll,
		BatchTimeout: time.Millisecond, BatchSize: 1000,
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func headers(attrs map[string]string) []kgo.Header {
	var hs []kgo.Header
	for k, v := range attrs {
		hs = append(hs, kgo.Header{Key: k, Value: []byte(v)})
	}
	return hs
}

// readTopic returns every record of topic, partition by partition.
func readTopic(ctx context.Context, t testing.TB, addr, topic string) ([]kgo.Message, error) {
	d := &kgo.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	parts, err := conn.ReadPartitions(topic)
	_ = conn.Close()
	if err != nil {
		return nil, err
	}
	var out []kgo.Message
	for _, p := range parts {
		first, last, err := offsets(ctx, d, addr, topic, p.ID)
		if err != nil {
			return nil, err
		}
		if last <= first {
			continue
		}
		// MaxBytes over the largest record a test writes (a 1 MiB dead letter),
		// so that one fetch always holds a whole record.
		r := kgo.NewReader(kgo.ReaderConfig{Brokers: []string{addr}, Topic: topic, Partition: p.ID, Dialer: d, MaxWait: 100 * time.Millisecond, MaxBytes: 4 << 20})
		if err := r.SetOffset(first); err != nil {
			_ = r.Close()
			return nil, err
		}
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				_ = r.Close()
				return nil, err
			}
			out = append(out, m)
			if m.Offset+1 >= last {
				break
			}
		}
		_ = r.Close()
	}
	return out, nil
}

func offsets(ctx context.Context, d *kgo.Dialer, addr, topic string, partition int) (first, last int64, err error) {
	conn, err := d.DialLeader(ctx, "tcp", addr, topic, partition)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	return conn.ReadOffsets()
}

// committed returns the group's committed offset of each partition of
// topic (-1 where none) and each partition's log end.
func committed(ctx context.Context, t testing.TB, addr, group, topic string, partitions int) (commit, end []int64, err error) {
	c := &kgo.Client{Addr: kgo.TCP(addr), Transport: transport(t)}
	ids := make([]int, partitions)
	for i := range ids {
		ids[i] = i
	}
	resp, err := c.OffsetFetch(ctx, &kgo.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ids}})
	if err == nil && resp.Error != nil {
		err = resp.Error
	}
	if err != nil {
		return nil, nil, err
	}
	commit = make([]int64, partitions)
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return nil, nil, p.Error
		}
		commit[p.Partition] = p.CommittedOffset
	}
	d := &kgo.Dialer{Timeout: 5 * time.Second}
	end = make([]int64, partitions)
	for i := range ids {
		if _, end[i], err = offsets(ctx, d, addr, topic, i); err != nil {
			return nil, nil, err
		}
	}
	return commit, end, nil
}

// Hook adapters: a func of the hook's method's type.
type (
	onCommit     = grouptest.OnKafkaCommit
	onLateAck    = grouptest.OnKafkaLateAck
	onRebalance  = grouptest.OnKafkaRebalance
	onDeadLetter = grouptest.OnKafkaDeadLetter
)

// fastGroup makes rebalances take well under a second.
func fastGroup() []kafkasource.Option {
	return []kafkasource.Option{kafkagroup.HeartbeatInterval(100 * time.Millisecond), kafkagroup.SessionTimeout(6 * time.Second),
		kafkagroup.RebalanceTimeout(10 * time.Second), kafkasource.JoinGroupBackoff(200 * time.Millisecond)}
}

func newSource(t testing.TB, addr, group string, topics []string, opts ...kafkasource.Option) *kafkasource.Source {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	base := append(fastGroup(), kafkagroup.CommitInterval(100*time.Millisecond),
		kafkagroup.RevokeTimeout(2*time.Second), kafkagroup.FetchMaxWait(200*time.Millisecond), kafkagroup.WithLogger(testenv.Logger(t)))
	s, err := kafkasource.New(ctx, []string{addr}, group, topics, append(base, opts...)...)
	if err != nil {
		t.Fatalf("kafkasource.New: %v", err)
	}
	grouptest.CloseAtEnd(t, s)
	grouptest.Join(t, s)
	return s
}
