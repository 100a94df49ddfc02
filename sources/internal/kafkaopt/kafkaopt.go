// Package kafkaopt carries the options of onceq's Kafka sources. Each
// source's Option is an interface over one unexported method of this
// package, named for its client: KafkaGo (kafkasource) and Franz
// (franzsource). The settings both sources take are Shared, with both
// methods, so kafkagroup's options go to either; an option only one
// client understands has that client's method alone, so the compiler
// refuses it to the other source. It is its own package so that
// kafkagroup, which users import, can declare its Option over it while
// the sources read the settings.
package kafkaopt

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/configerr"
)

// KafkaGo is an option kafkasource, over segmentio/kafka-go, takes.
type KafkaGo interface{ applyKafkaGo(*Settings) }

// Franz is an option franzsource, over franz-go, takes.
type Franz interface{ applyFranz(*Settings) }

// Shared is an option both sources take.
type Shared interface {
	KafkaGo
	Franz
}

// Func is a Shared option: it sets settings both sources take.
type Func func(*Settings)

func (f Func) applyKafkaGo(s *Settings) { f(s) }
func (f Func) applyFranz(s *Settings)   { f(s) }

// Join is opts as one Shared option, applying each in order.
func Join[O Shared](opts []O) Shared { return joined[O](slices.Clone(opts)) }

type joined[O Shared] []O

func (j joined[O]) applyKafkaGo(s *Settings) {
	for _, o := range j {
		if any(o) != nil {
			o.applyKafkaGo(s)
		}
	}
}

func (j joined[O]) applyFranz(s *Settings) {
	for _, o := range j {
		if any(o) != nil {
			o.applyFranz(s)
		}
	}
}

// kafkaGoOnly and franzOnly set C, one source's own configuration. They
// reach it through Settings.own, because the method a source calls on
// every option cannot name C: a Func serves both sources' C.
type (
	kafkaGoOnly[C any] func(*C)
	franzOnly[C any]   func(*C)
)

func (f kafkaGoOnly[C]) applyKafkaGo(s *Settings) { s.own = append(s.own, (func(*C))(f)) }
func (f franzOnly[C]) applyFranz(s *Settings)     { s.own = append(s.own, (func(*C))(f)) }

// KafkaGoOnly is an option only kafkasource takes: set sets C, its
// configuration.
func KafkaGoOnly[C any](set func(*C)) KafkaGo { return kafkaGoOnly[C](set) }

// FranzOnly is an option only franzsource takes: set sets C, its
// configuration.
func FranzOnly[C any](set func(*C)) Franz { return franzOnly[C](set) }

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
	// own are the options of the source's own client, in the order
	// given: each a func(*C) for that source's configuration C.
	own []any
}

// DefaultMaxInFlightBytes bounds, by default, the records a source holds
// fetched and not done, over all its partitions: a quarter of a GiB, a
// small share of a modest worker's memory, and room for 256 records of a
// megabyte.
const DefaultMaxInFlightBytes = 256 << 20

// ApplyKafkaGo returns the settings opts give over the defaults both
// sources share, and runs kafkasource's own options on c, its
// configuration.
func ApplyKafkaGo[C any, O KafkaGo](opts []O, c *C) Settings {
	return apply(opts, func(o O, s *Settings) { o.applyKafkaGo(s) }, c)
}

// ApplyFranz is ApplyKafkaGo for franzsource.
func ApplyFranz[C any, O Franz](opts []O, c *C) Settings {
	return apply(opts, func(o O, s *Settings) { o.applyFranz(s) }, c)
}

func apply[C, O any](opts []O, set func(O, *Settings), c *C) Settings {
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
		set(o, &s)
	}
	// Only one client's method was called, and only that client's own
	// options add to own, each made by its source over its configuration
	// C: the assertion cannot fail.
	for _, f := range s.own {
		f.(func(*C))(c)
	}
	s.own = nil
	return s
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
