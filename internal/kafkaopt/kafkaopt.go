// Package kafkaopt carries the options of onceq's Kafka sources: the
// settings both take (set by package kafkagroup's options) and, in the
// same list, the options only one client's source takes. It is its own
// package so that kafkagroup, which users import, can declare Option over
// it while the sources read the settings.
package kafkaopt

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/configerr"
)

// Option sets what a Kafka source is configured with. Its method is
// unexported, so only this package makes one: kafkagroup's options with
// Func, a client's source's own with Client.
type Option interface{ apply(*Settings) }

// Func is an Option that sets shared settings.
type Func func(*Settings)

func (f Func) apply(s *Settings) { f(s) }

// Client is an Option only one client's source takes: set sets C, that
// source's own configuration, and Apply for any other C refuses it.
func Client[C any](set func(*C)) Option {
	return Func(func(s *Settings) { s.Client = append(s.Client, set) })
}

// Reset values, as kafkagroup's ResetEarliest and ResetLatest.
const (
	ResetEarliest = iota
	ResetLatest
)

// Settings are what both Kafka sources take. A zero timing or fetch size
// means the client's default, which the source fills in.
type Settings struct {
	Ordering         broker.Ordering
	MaxInFlight      int
	MaxInFlightBytes int64
	CommitInterval   time.Duration
	RevokeTimeout    time.Duration
	DeadLetterTopic  string
	Logger           *slog.Logger
	Hooks            []any
	Meter            metric.MeterProvider
	Heartbeat        time.Duration
	Session          time.Duration
	Rebalance        time.Duration
	FetchMaxWait     time.Duration
	FetchMaxBytes    int
	Reset            int
	// Client are the options of one client's source, in the order given:
	// each a func(*C) for that source's configuration C.
	Client []any
}

// DefaultMaxInFlightBytes bounds, by default, the records a source holds
// fetched and not done, over all its partitions: a quarter of a GiB, a
// small share of a modest worker's memory, and room for 256 records of a
// megabyte.
const DefaultMaxInFlightBytes = 256 << 20

// Apply returns the settings opts give, over the defaults both sources
// share, and runs the options of the source configured by C on c. It
// refuses an option of another source, naming pkg, the source's package.
func Apply[C any, O Option](pkg string, opts []O, c *C) (Settings, error) {
	s := Settings{
		Ordering:         broker.OrderByKey,
		MaxInFlight:      256,
		MaxInFlightBytes: DefaultMaxInFlightBytes,
		CommitInterval:   time.Second,
		RevokeTimeout:    10 * time.Second,
		FetchMaxWait:     time.Second,
	}
	for _, o := range opts {
		if any(o) == nil {
			continue
		}
		o.apply(&s)
	}
	for _, o := range s.Client {
		set, ok := o.(func(*C))
		if !ok {
			return s, fmt.Errorf("%s: %w: an option of another Kafka source (%T)", pkg, configerr.ErrInvalidConfig, o)
		}
		set(c)
	}
	return s, nil
}

// Check checks the settings once the source has filled in its client's
// defaults: the error names the option and wraps ErrInvalidConfig, with
// pkg, the source's package, in front.
func (s *Settings) Check(pkg string) error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w: option %s", pkg, configerr.ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case s.Ordering != broker.OrderByKey && s.Ordering != broker.OrderByPartition && s.Ordering != broker.Unordered:
		return invalid("Ordering %d: unknown", s.Ordering)
	case s.MaxInFlight < 1:
		return invalid("MaxInFlightPerPartition %d: must be at least 1", s.MaxInFlight)
	case s.MaxInFlightBytes < 1:
		return invalid("MaxInFlightBytes %d: must be positive", s.MaxInFlightBytes)
	case s.CommitInterval <= 0:
		return invalid("CommitInterval %v: must be positive", s.CommitInterval)
	case s.RevokeTimeout <= 0:
		return invalid("RevokeTimeout %v: must be positive", s.RevokeTimeout)
	case s.Heartbeat < 0 || s.Session < 0 || s.Rebalance < 0:
		return invalid("HeartbeatInterval %v, SessionTimeout %v, RebalanceTimeout %v: must not be negative",
			s.Heartbeat, s.Session, s.Rebalance)
	case s.RevokeTimeout >= s.Rebalance:
		return invalid("RevokeTimeout %v: must be shorter than the rebalance timeout %v, or the group drops this member while it drains",
			s.RevokeTimeout, s.Rebalance)
	case s.FetchMaxWait <= 0:
		return invalid("FetchMaxWait %v: must be positive", s.FetchMaxWait)
	case s.FetchMaxBytes < 1 || s.FetchMaxBytes > math.MaxInt32:
		return invalid("FetchMaxBytes %d: must be positive and fit in 32 bits", s.FetchMaxBytes)
	case s.Reset != ResetEarliest && s.Reset != ResetLatest:
		return invalid("OffsetReset %d: unknown", s.Reset)
	}
	return nil
}

// Shared returns s: a source's configuration, which embeds Settings,
// hands them over with it.
func (s *Settings) Shared() *Settings { return s }

// Default gives the settings left zero the client's defaults.
func (s *Settings) Default(heartbeat, session, rebalance time.Duration, fetchMaxBytes int) {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&s.Heartbeat, heartbeat}, {&s.Session, session}, {&s.Rebalance, rebalance}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if s.FetchMaxBytes == 0 {
		s.FetchMaxBytes = fetchMaxBytes
	}
}
