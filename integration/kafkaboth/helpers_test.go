package kafkaboth_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// TestMain checks for leaked goroutines once all tests are done, which
// lets tests run in parallel.
// A control function of the test broker that a test released as the
// broker closed (a held group join) can be left waiting for the closed
// broker's lock: the in-process broker's goroutine, not the code under
// test's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).runControl.func1"))
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
	resp, err := kadm.NewClient(client(t, addr)).CreateTopic(testenv.Context(t, 10*time.Second), partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// committed returns the group's committed offset of each partition of
// topic (-1 where none) and each partition's log end.
func committed(ctx context.Context, addr, group, topic string) (commit, end []int64, err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, err
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		return nil, nil, err
	}
	end = make([]int64, len(ends[topic]))
	commit = make([]int64, len(end))
	for p := range end {
		end[p] = ends[topic][int32(p)].Offset
		commit[p] = -1
		if o, ok := offs.Lookup(topic, int32(p)); ok {
			commit[p] = o.At
		}
	}
	return commit, end, nil
}

// groupOptions make rebalances take well under a second on kfake, for
// either source.
func groupOptions(t testing.TB) []kafkagroup.Option {
	return []kafkagroup.Option{kafkagroup.HeartbeatInterval(100 * time.Millisecond), kafkagroup.SessionTimeout(6 * time.Second),
		kafkagroup.RebalanceTimeout(10 * time.Second), kafkagroup.CommitInterval(100 * time.Millisecond),
		kafkagroup.RevokeTimeout(2 * time.Second), kafkagroup.FetchMaxWait(200 * time.Millisecond), kafkagroup.WithLogger(testenv.Logger(t))}
}

// newFranzSource opens a franz-go source in group and waits until it has
// joined.
func newFranzSource(t testing.TB, addr, group, topic string, opts ...franzsource.Option) *franzsource.Source {
	t.Helper()
	s, err := franzsource.New(testenv.Context(t, 10*time.Second), []string{addr}, group, []string{topic},
		append([]franzsource.Option{kafkagroup.Options(groupOptions(t)...)}, opts...)...)
	if err != nil {
		t.Fatalf("franzsource.New: %v", err)
	}
	grouptest.CloseAtEnd(t, s)
	grouptest.Join(t, s)
	return s
}

func newKafkaSource(t testing.TB, addr, group, topic string, opts ...kafkasource.Option) *kafkasource.Source {
	t.Helper()
	base := []kafkasource.Option{kafkagroup.Options(groupOptions(t)...), kafkasource.JoinGroupBackoff(200 * time.Millisecond)}
	s, err := kafkasource.New(testenv.Context(t, 10*time.Second), []string{addr}, group, []string{topic}, append(base, opts...)...)
	if err != nil {
		t.Fatalf("kafkasource.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func produce(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	if err := cl.ProduceSync(testenv.Context(t, 30*time.Second), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}
