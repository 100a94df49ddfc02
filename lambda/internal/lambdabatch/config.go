package lambdabatch

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/configerr"
)

// DefaultConcurrency is the default of each handler package's Concurrency.
const DefaultConcurrency = 10

// Config is what every handler package's options set.
type Config struct {
	// Name is the package's name, the prefix of its log lines and errors.
	Name           string
	Concurrency    int
	DeadlineMargin time.Duration
	// DeadLetter sends a dead-lettered record on; nil: there is no
	// destination and such a record is reported.
	DeadLetter   func(ctx context.Context, m *consumer.Message, reason string) error
	GuardOptions []consumer.GuardOption
	Logger       *slog.Logger
}

// NewConfig is a Config with the defaults, for the package name and its
// DefaultDeadlineMargin (a constant of each package, so go doc shows it).
func NewConfig(name string, margin time.Duration) Config {
	return Config{Name: name, Concurrency: DefaultConcurrency, DeadlineMargin: margin}
}

func (c *Config) validate() error {
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("%s: %w: Concurrency %d: must be at least 1", c.Name, configerr.ErrInvalidConfig, c.Concurrency)
	case c.DeadlineMargin < time.Second:
		// Leases end on whole seconds: a margin under one second could let
		// a handler run past the lease it was given.
		return fmt.Errorf("%s: %w: DeadlineMargin %v: must be at least 1s", c.Name, configerr.ErrInvalidConfig, c.DeadlineMargin)
	}
	return nil
}
