package kafkacore

import (
	"fmt"

	"go.opentelemetry.io/otel"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/logref"
	"github.com/onceq/onceq/sources/internal/kafkaopt"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// Config is a source's configuration C: the shared Settings, embedded, and
// what only its client takes.
type Config[C any] interface {
	*C
	// Shared returns the embedded Settings.
	Shared() *kafkaopt.Settings
	// Complete fills in the client's defaults for the settings left zero
	// and checks what only the client takes.
	Complete() error
}

// Setup is the start of both sources' New: it checks New's arguments
// (brokers, each host:port, a group and topics), gives c the shared
// settings s (kafkaopt.ApplyKafkaGo or ApplyFranz applied the options to
// it, and c's own to c), completes and checks them, and sorts the hooks. It
// gives c the logger to use, and the global MeterProvider when none was
// set. pkg names the source in its errors.
func Setup[C any, PC Config[C]](pkg string, brokers []string, group string, topics []string, s kafkaopt.Settings, c PC) (Hooks, *logref.Ref, error) {
	invalid := func(what string) error { return fmt.Errorf("%s: %w: %s", pkg, kafkagroup.ErrInvalidConfig, what) }
	switch {
	case len(brokers) == 0:
		return Hooks{}, nil, invalid("no brokers")
	case group == "":
		return Hooks{}, nil, invalid("no group ID")
	case len(topics) == 0:
		return Hooks{}, nil, invalid("no topics")
	}
	if err := CheckBrokers(pkg, brokers); err != nil {
		return Hooks{}, nil, err
	}
	*c.Shared() = s
	if err := c.Complete(); err != nil {
		return Hooks{}, nil, err
	}
	set := c.Shared()
	if err := set.Check(pkg); err != nil {
		return Hooks{}, nil, err
	}
	hs, err := CollectHooks(set.Hooks)
	if err != nil {
		return Hooks{}, nil, err
	}
	logs := logref.New(set.Logger)
	set.Logger = logs.Logger()
	if set.Meter == nil {
		set.Meter = otel.GetMeterProvider()
	}
	return hs, logs, nil
}

// Configure readies d (Init) to dispatch records made into Messages by
// toMessage, calling onDone after each is done, with the hooks, set's
// logger and dead-letter topic (named in the metrics), and returns the
// Methods that carry out the source's settles through d and declare its
// Capabilities from set and logs.
func (d *Dispatcher[R, X]) Configure(toMessage func(m *broker.Message, r R, attempt int), onDone func(p *Partition[R, X], unfinished int),
	hooks Hooks, set *kafkaopt.Settings, logs *logref.Ref) Methods[R, X] {
	d.Init()
	d.ToMessage, d.OnDone, d.Hooks, d.Logger, d.DeadLetterTopic = toMessage, onDone, hooks, set.Logger, set.DeadLetterTopic
	return Methods[R, X]{d: d, set: set, logs: logs}
}
