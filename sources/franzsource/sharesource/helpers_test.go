package sharesource_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource/sharesource"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(workerEnv); addr != "" {
		os.Exit(runWorker(addr))
	}
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).run"))
}

// testLock is the acquisition lock of the test brokers: short, so that
// lock expiry shows within a test.
const testLock = 4 * time.Second

// cluster starts a one-broker kfake cluster serving share groups with a
// short lock, swept often, and stops it when the test ends.
func cluster(t testing.TB) string {
	t.Helper()
	return newCluster(t).ListenAddrs()[0]
}

// newCluster is cluster's broker, for a test that controls its answers.
func newCluster(t testing.TB) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": "4000",
		"share.record.lock.sweep.interval.ms": "100",
		"group.share.delivery.count.limit":    "10",
		"group.share.heartbeat.interval.ms":   "200",
	}))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

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

// newSource makes a source reading the group from the start of topic,
// closed when the test ends.
func newSource(t testing.TB, addr, group, topic string, opts ...sharesource.Option) *sharesource.Source {
	t.Helper()
	src, err := sharesource.New(testenv.Context(t, 30*time.Second), []string{addr}, group, []string{topic},
		append([]sharesource.Option{sharesource.FromEarliest()}, opts...)...)
	if err != nil {
		t.Fatalf("sharesource.New: %v", err)
	}
	grouptest.CloseAtEnd(t, src)
	return src
}

// readTopic returns every record of a one-partition topic.
func readTopic(ctx context.Context, addr, topic string) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	for {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r); n++ })
		if n == 0 {
			return out, ctx.Err()
		}
	}
}
