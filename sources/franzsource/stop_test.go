package franzsource_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// onCommitError adapts a function to kafkagroup.HookKafkaCommitError.
type onCommitError func(ctx context.Context, gen int32, err error)

func (f onCommitError) OnKafkaCommitError(ctx context.Context, gen int32, err error) {
	f(ctx, gen, err)
}

// A member stopped (SIGTERM) while its group rebalances, its join and sync
// still under way so that its final commit cannot be sent, stops cleanly:
// Close returns nil (the partitions' next owner reads what was not
// committed again), and does not wait past the rebalance timeout for the
// commit.
func TestCloseWhileGroupRebalances(t *testing.T) {
	t.Parallel()
	c := controlled(t)
	addr := c.ListenAddrs()[0]
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 2)
	produce(t, producer(t, addr, topic), &kgo.Record{Value: []byte("m1"), Partition: 0})

	// The group's second generation stays in its sync (the broker's answer
	// held) until this member's final commit has failed or given up.
	syncing, release := make(chan struct{}), make(chan struct{})
	var syncOnce, releaseOnce sync.Once
	c.ControlKey(kmsg.SyncGroup.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if r.(*kmsg.SyncGroupRequest).Generation >= 2 {
			syncOnce.Do(func() { close(syncing) })
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	const rebalance = 2 * time.Second
	opts := []franzsource.Option{kafkagroup.HeartbeatInterval(100 * time.Millisecond), kafkagroup.SessionTimeout(6 * time.Second),
		kafkagroup.RebalanceTimeout(rebalance), kafkagroup.RevokeTimeout(time.Second), kafkagroup.CommitInterval(time.Hour),
		kafkagroup.WithLogger(testenv.Logger(t))}
	a, err := franzsource.New(testenv.Context(t, 10*time.Second), []string{addr}, group, []string{topic},
		append(opts, kafkagroup.WithHooks(onCommitError(func(context.Context, int32, error) {
			releaseOnce.Do(func() { close(release) })
		})))...)
	if err != nil {
		t.Fatal(err)
	}
	msgs := grouptest.ReceiveN(t, a, 1)
	if err := a.Ack(context.Background(), msgs[0]); err != nil {
		t.Fatal(err)
	}

	// A second member joins: the rebalance starts.
	b := newSource(t, addr, group, []string{topic}, opts...)
	bctx, bstop := context.WithCancel(context.Background())
	bdone := make(chan struct{})
	go func() {
		defer close(bdone)
		_, _ = b.Receive(bctx, 1)
	}()
	t.Cleanup(func() { bstop(); <-bdone })
	select {
	case <-syncing:
	case <-time.After(20 * time.Second):
		t.Fatal("the group never rebalanced")
	}

	start := time.Now()
	err = a.Close(testenv.Context(t, 30*time.Second))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Close while the group rebalances: %v, want nil", err)
	}
	if took > 2*rebalance {
		t.Fatalf("Close took %v while the group rebalanced, want it bounded by the rebalance timeout %v", took, rebalance)
	}
}
