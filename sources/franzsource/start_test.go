package franzsource_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/internal/grouptest"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// A broker that takes the connection and never answers does not hold New:
// cancelling New's context (SIGTERM at start) ends it with ctx's error, with
// or without a dead-letter topic.
func TestNewSilentBrokerHonoursContext(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]kafkagroup.Option{
		"plain":             nil,
		"dead-letter topic": {kafkagroup.DeadLetterTopic("dlq")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addr, asked := grouptest.SilentBroker(t)
			grouptest.ReturnsOnCancel(t, asked, func(ctx context.Context) error {
				s, err := franzsource.New(ctx, []string{addr}, "g", []string{"t"}, append(opts, kafkagroup.WithLogger(testenv.Logger(t)))...)
				if s != nil {
					_ = s.Close(context.Background())
				}
				return err
			})
		})
	}
}

// A broker address without a port is refused by New, before any dial,
// with an error that names it (franz-go would dial port 9092 instead).
func TestNewRefusesAddressWithoutPort(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"kafka-1", "kafka-1:", "kafka-1:x", "::1", "kafka-1:70000"} {
		s, err := franzsource.New(testenv.Context(t, 10*time.Second), []string{"127.0.0.1:1", addr}, "g", []string{"t"})
		if s != nil {
			_ = s.Close(context.Background())
		}
		var ae *kafkagroup.AddressError
		if !errors.As(err, &ae) || ae.Address != addr || !errors.Is(err, kafkagroup.ErrInvalidConfig) || !strings.Contains(err.Error(), addr) {
			t.Errorf("New with broker %q: %v, want an AddressError naming it", addr, err)
		}
	}
}

// Run checks the store before the source joins the group: a member whose
// store is broken never takes partitions away from the healthy ones.
func TestRunChecksStoreBeforeJoining(t *testing.T) {
	t.Parallel()
	for name, p := range map[string]franzsource.Protocol{"cooperative": franzsource.Cooperative, "KIP-848": franzsource.ConsumerProtocol} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := controlled(t)
			addr := c.ListenAddrs()[0]
			topic := topicName(t, "in")
			createTopic(t, addr, topic, 1)
			joined := make(chan struct{})
			var once bool
			for _, key := range []int16{kmsg.JoinGroup.Int16(), kmsg.ConsumerGroupHeartbeat.Int16()} {
				c.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
					if !once { // kfake runs control functions one at a time
						once = true
						close(joined)
					}
					return nil, nil, false
				})
			}
			s, err := franzsource.New(testenv.Context(t, 10*time.Second), []string{addr}, topicName(t, "group"), []string{topic},
				append(fastGroup(), kafkagroup.RevokeTimeout(2*time.Second), franzsource.GroupProtocol(p), kafkagroup.WithLogger(testenv.Logger(t)))...)
			if err != nil {
				t.Fatal(err)
			}
			grouptest.StoreCheckedFirst(t, s, joined)
		})
	}
}
