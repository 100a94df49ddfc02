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

	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// A broker that never answers does not hold New past its context.
func TestNewSilentBrokerHonoursContext(t *testing.T) {
	grouptest.NewSilentBrokerHonoursContext(t, grouptest.Opener(kafkasource.New))
}

// A broker that never answers is named while New waits on it, and in its
// error.
func TestNewSilentBrokerNamed(t *testing.T) {
	grouptest.NewSilentBrokerNamed(t, grouptest.Opener(kafkasource.New))
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
