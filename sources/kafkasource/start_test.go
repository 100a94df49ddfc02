package kafkasource_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/internal/grouptest"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// A broker that never answers does not hold New past its context.
func TestNewSilentBrokerHonoursContext(t *testing.T) {
	grouptest.NewSilentBrokerHonoursContext(t, grouptest.Opener(kafkasource.New))
}

// With no deadline in its context, New's check of a silent broker still
// ends, after kafkacore's check timeout, with an error naming the brokers.
func TestNewSilentBrokerBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu    sync.Mutex
			peers []net.Conn
		)
		dial := func(context.Context, string, string) (net.Conn, error) {
			c, peer := net.Pipe() // the peer never reads nor writes
			mu.Lock()
			peers = append(peers, peer)
			mu.Unlock()
			return c, nil
		}
		start := time.Now()
		s, err := kafkasource.New(context.Background(), []string{"broker.invalid:9092"}, "g", []string{"t"},
			kafkasource.WithDialer(&kgo.Dialer{DialFunc: dial}), kafkagroup.WithLogger(testenv.Logger(t)))
		if s != nil {
			_ = s.Close(context.Background())
		}
		took := time.Since(start)
		mu.Lock()
		for _, p := range peers {
			_ = p.Close()
		}
		mu.Unlock()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "broker.invalid:9092") {
			t.Fatalf("New on a silent broker: %v, want a deadline error naming the broker", err)
		}
		if took > time.Minute {
			t.Fatalf("New took %v on a silent broker", took)
		}
	})
}

// A broker address without a port is refused by New, naming it.
func TestNewRefusesAddressWithoutPort(t *testing.T) {
	grouptest.NewRefusesAddressWithoutPort(t, grouptest.Opener(kafkasource.New))
}

// Run checks the store before the source joins the group: a member whose
// store is broken never takes partitions away from the healthy ones.
func TestRunChecksStoreBeforeJoining(t *testing.T) {
	t.Parallel()
	c := controlled(t)
	addr := c.ListenAddrs()[0]
	topic := topicName(t, "in")
	createTopic(t, addr, topic, 1)
	joined := make(chan struct{})
	c.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		close(joined) // once: kfake drops a control function after it ran
		return nil, nil, false
	})
	s, err := kafkasource.New(testenv.Context(t, 10*time.Second), []string{addr}, topicName(t, "group"), []string{topic},
		kafkagroup.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	grouptest.StoreCheckedFirst(t, s, joined)
}
