package kafkalambda

import (
	"context"
	"log/slog"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/lambda/internal/lambdabatch"
)

// ErrInvalidConfig is wrapped by every error [New] returns for a wrong
// option. It is the ErrInvalidConfig of every onceq package: errors.Is with
// any of them matches.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// Option configures a function built with [New]. The SQS handler
// (package sqslambda) has options of its own type, so an option that
// applies only to SQS, such as its WithVisibility, does not compile here.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config = lambdabatch.Config

// DefaultDeadlineMargin is DeadlineMargin's default.
const DefaultDeadlineMargin = time.Second

// Concurrency bounds how many records of one batch run at once (default
// 10): each topic-partition's records run one at a time, in offset order,
// so this bounds the partitions that run at once.
func Concurrency(n int) Option { return optionFunc(func(c *config) { c.Concurrency = n }) }

// DeadlineMargin is how long before the invocation's deadline handlers are
// stopped and no record is started any more (default 1s, at least 1s). It
// leaves time to commit the last results, send dead letters and answer
// before Lambda stops the function; calls still in flight 250ms before the
// deadline are cancelled and their records reported as failures.
func DeadlineMargin(d time.Duration) Option {
	return optionFunc(func(c *config) { c.DeadlineMargin = d })
}

// WithDeadLetters sets where a record the Guard dead-letters goes: your
// own [DeadLetterer] ([DeadLetterTopic] is this for a Kafka topic). Without it such a record is
// reported as a failure: its partition resumes there, so it comes back
// until a destination takes it.
func WithDeadLetters(d DeadLetterer) Option {
	return optionFunc(func(c *config) {
		c.DeadLetter = nil
		if d != nil {
			c.DeadLetter = d.DeadLetter
		}
	})
}

// WithGuardOptions passes options to the [consumer.Guard] the function
// runs (HandlerTimeout, MaxAttempts, Namespace, WithKeyFunc, hooks…).
// LeaseTTL still applies, but no lease outlives an invocation's deadline.
// The options of a Consumer's receive loop alone (consumer.Concurrency,
// MaxInFlight, ...) are not GuardOptions and do not compile here: use this
// package's Concurrency.
func WithGuardOptions(opts ...consumer.GuardOption) Option {
	return optionFunc(func(c *config) { c.GuardOptions = append(c.GuardOptions, opts...) })
}

// WithLogger sets the logger for what happens to records (default
// slog.Default(), as in every onceq package). It is handed to the Guard and
// the Store too, unless they were given their own
// (WithGuardOptions(consumer.WithLogger(other)) gives the Guard another).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.Logger = l }) }

// DeadLetterer sends a record the Guard dead-lettered to a dead-letter
// destination; m.Handle holds the Lambda record (see [Record]). When
// DeadLetter returns nil the record counts as handled and is not reported;
// an error makes its partition resume there.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, m *consumer.Message, reason string) error
}

// DeadLetterFunc adapts a function to DeadLetterer.
type DeadLetterFunc func(ctx context.Context, m *consumer.Message, reason string) error

// DeadLetter calls f.
func (f DeadLetterFunc) DeadLetter(ctx context.Context, m *consumer.Message, reason string) error {
	return f(ctx, m, reason)
}
