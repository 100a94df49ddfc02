package franzsource_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// TestMain checks for leaked goroutines once all tests are done, which
// lets tests run in parallel.
// TestMain checks that no goroutine outlives the tests but the kfake test
// broker's own run loop, which a control function a test slept (to hold a
// rebalance) can leave parked on kfake's lock after the cluster closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).run"))
}

// cluster starts a one-broker kfake cluster on a loopback port and stops it
// when the test ends. KIP-848 members heartbeat every 100ms, so that the
// broker moves partitions within a test's patience.
func cluster(t testing.TB) string { return controlled(t).ListenAddrs()[0] }

// controlled is cluster's kfake cluster, for a test that controls what the
// broker answers.
func controlled(t testing.TB) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// client is a plain franz-go client (no group), closed when the test ends.
func client(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func topicName(t testing.TB, suffix string) string { return grouptest.TopicName(t, suffix) }

func createTopic(t testing.TB, addr, topic string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testenv.Context(t, 10*time.Second), client(t, addr))
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

func produce(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	for len(recs) > 0 {
		n := min(len(recs), 1000)
		if err := cl.ProduceSync(testenv.Context(t, 30*time.Second), recs[:n]...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		recs = recs[n:]
	}
}

// producer produces to topic, partitioning by key like any Kafka producer.
func producer(t testing.TB, addr, topic string) *kgo.Client {
	return client(t, addr, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
}

func headers(attrs map[string]string) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	for k, v := range attrs {
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return hs
}

// readTopic returns every record of topic.
func readTopic(ctx context.Context, t testing.TB, addr, topic string) ([]*kgo.Record, error) {
	end, err := logEnd(ctx, addr, topic)
	if err != nil {
		return nil, err
	}
	want := 0
	offs := map[int32]kgo.Offset{}
	for p, e := range end {
		want += int(e)
		offs[int32(p)] = kgo.NewOffset().AtStart()
	}
	if want == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out = append(out, fs.Records()...)
	}
	return out, nil
}

// logEnd returns each partition's log end.
func logEnd(ctx context.Context, addr, topic string) ([]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	n := len(mresp.Topics[0].Partitions)
	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for i := range n {
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Partition, p.Timestamp = int32(i), -1
		lt.Partitions = append(lt.Partitions, p)
	}
	lo.Topics = append(lo.Topics, lt)
	lresp, err := lo.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	end := make([]int64, n)
	for _, p := range lresp.Topics[0].Partitions {
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return nil, err
		}
		end[p.Partition] = p.Offset
	}
	return end, nil
}

// committed returns the group's committed offset of each partition of
// topic (-1 where none) and each partition's log end.
func committed(ctx context.Context, addr, group, topic string) (commit, end []int64, err error) {
	if end, err = logEnd(ctx, addr, topic); err != nil {
		return nil, nil, err
	}
	n := len(end)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group = group
	ot := kmsg.NewOffsetFetchRequestTopic()
	ot.Topic = topic
	for i := range n {
		ot.Partitions = append(ot.Partitions, int32(i))
	}
	of.Topics = append(of.Topics, ot)
	oresp, err := of.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, err
	}
	if err := kerr.ErrorForCode(oresp.ErrorCode); err != nil {
		return nil, nil, err
	}
	commit = make([]int64, n)
	for i := range commit {
		commit[i] = -1
	}
	for _, tp := range oresp.Topics {
		for _, p := range tp.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, nil, err
			}
			commit[p.Partition] = p.Offset
		}
	}
	return commit, end, nil
}

type (
	onLateAck   = grouptest.OnKafkaLateAck
	onRebalance = grouptest.OnKafkaRebalance
)

// fastGroup makes rebalances take well under a second on kfake.
func fastGroup() []franzsource.Option {
	return []franzsource.Option{kafkagroup.HeartbeatInterval(100 * time.Millisecond), kafkagroup.SessionTimeout(6 * time.Second),
		kafkagroup.RebalanceTimeout(10 * time.Second)}
}

func newSource(t testing.TB, addr, group string, topics []string, opts ...franzsource.Option) *franzsource.Source {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	base := append(fastGroup(), kafkagroup.CommitInterval(100*time.Millisecond),
		kafkagroup.RevokeTimeout(2*time.Second), kafkagroup.FetchMaxWait(200*time.Millisecond), kafkagroup.WithLogger(testenv.Logger(t)))
	s, err := franzsource.New(ctx, []string{addr}, group, topics, append(base, opts...)...)
	if err != nil {
		t.Fatalf("franzsource.New: %v", err)
	}
	grouptest.CloseAtEnd(t, s)
	grouptest.Join(t, s)
	return s
}
