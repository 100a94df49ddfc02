// Package brokerwatch reports, through franz-go's hooks, how each broker
// answers a client: what a Source hands the consumer that runs it
// (broker.Runtime.Status), to turn its readiness and name the broker in
// its log while the broker fails.
package brokerwatch

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/sources/internal/kafkacore"
)

// Hooks reports to R what each broker answers: a dial that failed, a
// request it did not answer (a broker paused or gone) and the answers,
// by request. Give it to a client with kgo.WithHooks.
type Hooks struct{ R *kafkacore.Reporter }

func (w Hooks) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
		return
	}
	w.R.Report(broker.Status{Broker: addr(meta), Waiting: kafkacore.WaitConnection, Err: err})
}

func (w Hooks) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	err := e2e.Err()
	if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
		return
	}
	w.R.Report(broker.Status{Broker: addr(meta), Waiting: kmsg.NameForKey(key), Err: err})
}

func addr(meta kgo.BrokerMetadata) string {
	return net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
}

var (
	_ kgo.HookBrokerConnect = Hooks{}
	_ kgo.HookBrokerE2E     = Hooks{}
)
