package franzsource_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// A broker that never answers does not hold New past its context.
func TestNewSilentBrokerHonoursContext(t *testing.T) {
	grouptest.NewSilentBrokerHonoursContext(t, grouptest.Opener(franzsource.New))
}

// A broker that never answers is named while New waits on it, and in its
// error.
func TestNewSilentBrokerNamed(t *testing.T) {
	grouptest.NewSilentBrokerNamed(t, grouptest.Opener(franzsource.New))
}

// A broker address without a port is refused by New, naming it.
func TestNewRefusesAddressWithoutPort(t *testing.T) {
	grouptest.NewRefusesAddressWithoutPort(t, grouptest.Opener(franzsource.New))
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
