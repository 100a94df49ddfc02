package grouptest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// New is a Kafka source's New with the group and topics fixed: it returns
// New's error, and closes the source if it made one.
type New func(ctx context.Context, brokers []string, opts ...kafkagroup.Option) error

// Opener makes a New of newSource, kafkasource.New or franzsource.New,
// whose options O every kafkagroup.Option is.
func Opener[T any, S interface {
	*T
	Close(context.Context) error
}, O any](newSource func(context.Context, []string, string, []string, ...O) (S, error)) New {
	return func(ctx context.Context, brokers []string, opts ...kafkagroup.Option) error {
		s, err := newSource(ctx, brokers, "g", []string{"t"}, As[O](opts)...)
		if s != nil {
			_ = s.Close(context.Background())
		}
		return err
	}
}

// NewSilentBrokerHonoursContext: a broker that takes the connection and
// never answers does not hold New: cancelling New's context (SIGTERM at
// start) ends it with ctx's error, with or without a dead-letter topic.
func NewSilentBrokerHonoursContext(t *testing.T, open New) {
	t.Parallel()
	for name, opts := range map[string][]kafkagroup.Option{
		"plain":             nil,
		"dead-letter topic": {kafkagroup.DeadLetterTopic("dlq")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addr, asked := SilentBroker(t)
			ReturnsOnCancel(t, asked, func(ctx context.Context) error {
				return open(ctx, []string{addr}, append(opts, kafkagroup.WithLogger(testenv.Logger(t)))...)
			})
		})
	}
}

// NewRefusesAddressWithoutPort: a broker address without a port, or with
// one that is not a port number, is refused by New, before any dial, with
// an AddressError that names it (a Kafka client would dial port 9092
// instead).
func NewRefusesAddressWithoutPort(t *testing.T, open New) {
	t.Parallel()
	for _, addr := range []string{"kafka-1", "kafka-1:", "kafka-1:x", "::1", "kafka-1:70000"} {
		err := open(testenv.Context(t, 10*time.Second), []string{"127.0.0.1:1", addr})
		var ae *kafkagroup.AddressError
		if !errors.As(err, &ae) || ae.Address != addr || !errors.Is(err, kafkagroup.ErrInvalidConfig) || !strings.Contains(err.Error(), addr) {
			t.Errorf("New with broker %q: %v, want an AddressError naming it", addr, err)
		}
	}
}

// As gives opts, which both Kafka sources take, as one source's Option
// type O: kafkasource.Option or franzsource.Option.
func As[O any](opts []kafkagroup.Option) []O {
	out := make([]O, 0, len(opts))
	for _, o := range opts {
		out = append(out, any(o).(O))
	}
	return out
}

// NewSilentBrokerNamed: a broker that takes the connection and never
// answers is named while New waits on it (a line within
// waitlog.Every) and in New's error once its context ends.
func NewSilentBrokerNamed(t *testing.T, open New) {
	t.Parallel()
	addr, _ := SilentBroker(t)
	var logs testenv.LogBuffer
	err := open(testenv.Context(t, 12*time.Second), []string{addr}, kafkagroup.WithLogger(logs.Logger(slog.LevelInfo)))
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("New against a silent broker: %v, want an error naming %s", err, addr)
	}
	var said bool
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "waiting for the brokers") && strings.Contains(line, addr) {
			said = true
		}
	}
	if !said {
		t.Fatalf("no line naming the silent broker %s while New waited 12s:\n%s", addr, logs.String())
	}
}
