package kafkacontrol_test

import (
	"context"
	"sync"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// A member stopped (SIGTERM) while its group rebalances stops cleanly: its
// final commit was made (here there is none to make: its generation ended
// with the rebalance), and only the leave is left, which the group holds up
// until the rebalance ends. Close returns nil within its context, not the
// context's error: the stop did not fail.
func TestCloseWhileGroupRebalances(t *testing.T) {
	t.Parallel()
	c := controlled(t)
	addr := c.ListenAddrs()[0]
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 2)
	produce(t, writer(t, addr, topic), kgo.Message{Value: []byte("m1")})

	// A member that synced once and joins again is this test's member a
	// rejoining for the rebalance b starts: the broker's answer to that
	// join is held until the test ends.
	synced := map[string]bool{} // kfake runs control functions one at a time
	rejoining, release := make(chan struct{}), make(chan struct{})
	var rejoinOnce sync.Once
	c.ControlKey(kmsg.SyncGroup.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		synced[r.(*kmsg.SyncGroupRequest).MemberID] = true
		return nil, nil, false
	})
	c.ControlKey(kmsg.JoinGroup.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if id := r.(*kmsg.JoinGroupRequest).MemberID; id != "" && synced[id] {
			rejoinOnce.Do(func() { close(rejoining) })
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	t.Cleanup(func() { close(release) }) // before the cluster closes: cleanups run last first

	a, err := kafkasource.New(testenv.Context(t, 10*time.Second), []string{addr}, group, []string{topic},
		append(fastGroup(), kafkagroup.RevokeTimeout(time.Second), kafkagroup.WithLogger(testenv.Logger(t)))...)
	if err != nil {
		t.Fatal(err)
	}
	msgs := receiveN(t, a, 1)
	if err := a.Ack(context.Background(), msgs[0]); err != nil {
		t.Fatal(err)
	}
	newSource(t, addr, group, []string{topic}) // b: joins, the rebalance starts
	select {
	case <-rejoining:
	case <-time.After(30 * time.Second):
		t.Fatal("member a never rejoined")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close while the group rebalances: %v, want nil", err)
	}
}
