// Package brokerwatch reports what franz-go's clients meet of their
// brokers to the consumer that runs a Source (broker.Runtime.Status): the
// group source (package franzsource) and the share-group source (package
// sharesource) report alike, so that readiness follows the broker the same
// way over either.
package brokerwatch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/sources/internal/kafkacore"
)

// WaitFetch is what a fetch error, in a poll, is reported as waiting for.
const WaitFetch = "a fetch without errors"

// Hooks is a kgo.Hook (give it with kgo.WithHooks) that reports each
// broker's answers to r: a dial that failed, a request it did not answer
// (a broker paused or gone) or answered with an error, and the answers,
// by request.
type Hooks struct{ R *kafkacore.Reporter }

var (
	_ kgo.HookBrokerConnect = Hooks{}
	_ kgo.HookBrokerE2E     = Hooks{}
)

func (h Hooks) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if closing(err) {
		return
	}
	h.R.Report(broker.Status{Broker: addr(meta), Waiting: kafkacore.WaitConnection, Err: err})
}

func (h Hooks) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	err := e2e.Err()
	if closing(err) {
		return
	}
	h.R.Report(broker.Status{Broker: addr(meta), Waiting: kmsg.NameForKey(key), Err: err})
}

// closing reports an error of this side's own stop, not the broker's.
func closing(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed)
}

func addr(meta kgo.BrokerMetadata) string {
	return net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
}

// Fetches reports a poll's errors to r, as failures of WaitFetch at
// seeds, calling each (to log it) for every one but a cancellation; a
// poll without errors is reported as an answer. It returns the errors
// reported.
func Fetches(r *kafkacore.Reporter, seeds string, fs kgo.Fetches, each func(topic string, partition int32, err error)) int {
	n := 0
	fs.EachError(func(topic string, partition int32, err error) {
		if errors.Is(err, context.Canceled) {
			return
		}
		n++
		each(topic, partition, err)
		r.Report(broker.Status{Broker: seeds, Waiting: WaitFetch,
			Err: fmt.Errorf("fetching %s partition %d: %w", topic, partition, err)})
	})
	if n == 0 {
		r.Report(broker.Status{Broker: seeds, Waiting: WaitFetch})
	}
	return n
}

// quiet bounds a poll that follows one with errors. A franz-go poll
// returns only with records or errors, so on an idle topic the failure a
// poll reported would stay open, and readiness false, after the broker
// recovered; the client surfaces a fetch error again at each fetch, so a
// bounded poll that ends with neither is an answer.
const quiet = 5 * time.Second

// Poll runs poll(ctx); after a poll with errors (failing) it bounds it by
// a few seconds and reports one that ends with no record and no error as
// an answer to r, returning no fetches for it.
func Poll(ctx context.Context, r *kafkacore.Reporter, seeds string, failing bool, poll func(context.Context) kgo.Fetches) kgo.Fetches {
	if !failing {
		return poll(ctx)
	}
	pctx, cancel := context.WithTimeout(ctx, quiet)
	defer cancel()
	fs := poll(pctx)
	if ctx.Err() == nil && pctx.Err() != nil && fs.NumRecords() == 0 {
		n := 0
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				n++
			}
		})
		if n == 0 {
			r.Report(broker.Status{Broker: seeds, Waiting: WaitFetch})
			return nil
		}
	}
	return fs
}
