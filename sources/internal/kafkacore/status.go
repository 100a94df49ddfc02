package kafkacore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"github.com/onceq/onceq/broker"
)

// Reporter hands a Source's reports of its brokers to the consumer that
// runs it (broker.Runtime.Status), once attached; before that, or for a
// Source read in a loop of one's own, they go nowhere.
type Reporter struct {
	f atomic.Pointer[func(broker.Status)]
}

// Attach sets where reports go.
func (r *Reporter) Attach(f func(broker.Status)) {
	if f != nil {
		r.f.Store(&f)
	}
}

// Report passes s on.
func (r *Reporter) Report(s broker.Status) {
	if f := r.f.Load(); f != nil {
		(*f)(s)
	}
}

// What the connection watch reports its failures and answers as: a dial
// that failed, and a connection the broker did not answer on in time (or
// reset). Any bytes read are an answer.
const (
	WaitConnection = "connection"
	WaitAnswer     = "answer"
)

// WaitFetch is what the partition errors a fetch returns are reported as
// waiting for.
const WaitFetch = "a fetch without errors"

// WatchDial wraps dial so that every connection it makes reports to r: a
// dial that fails, a read that times out or is reset (a broker that hangs
// or went away), and the reads that answer.
func WatchDial(r *Reporter, dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
				r.Report(broker.Status{Broker: addr, Waiting: WaitConnection, Err: err})
			}
			return nil, err
		}
		r.Report(broker.Status{Broker: addr, Waiting: WaitConnection})
		return &watchedConn{Conn: c, r: r, addr: addr}, nil
	}
}

// watchedConn reports its reads.
type watchedConn struct {
	net.Conn
	r      *Reporter
	addr   string
	closed atomic.Bool
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	switch {
	case n > 0:
		c.r.Report(broker.Status{Broker: c.addr, Waiting: WaitAnswer})
	case err != nil && !c.closed.Load() && brokerFault(err):
		c.r.Report(broker.Status{Broker: c.addr, Waiting: WaitAnswer, Err: err})
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

// brokerFault says whether a read's error is the broker's: a timeout or a
// reset, not a connection this side closed or the broker closed in order.
func brokerFault(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op)
}

// SourceName is a Kafka source's String: what the consumer's log lines
// name it by while they wait on it (a group join at the first Receive),
// with the brokers it waits on.
func SourceName(pkg, group string, topics []string, brokers string) string {
	return fmt.Sprintf("%s: group %s, topics %s, brokers %s", pkg, group, strings.Join(topics, ","), brokers)
}
