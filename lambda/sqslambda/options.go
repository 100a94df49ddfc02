package sqslambda

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

// Option configures a function built with [New]. The Kafka handler
// (package kafkalambda) has options of its own type, so an option that
// applies only to SQS, such as [WithVisibility], does not compile there.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	batch      lambdabatch.Config
	visibility *visibility
}

// DefaultDeadlineMargin is DeadlineMargin's default.
const DefaultDeadlineMargin = time.Second

// Concurrency bounds how many records of one batch run at once (default
// 10): records of a standard queue, message groups of a FIFO queue.
func Concurrency(n int) Option { return optionFunc(func(c *config) { c.batch.Concurrency = n }) }

// DeadlineMargin is how long before the invocation's deadline handlers are
// stopped and no record is started any more (default 1s, at least 1s). It
// leaves time to commit the last results, send dead letters and answer
// before Lambda stops the function; calls still in flight 250ms before the
// deadline are cancelled and their records reported as failures.
func DeadlineMargin(d time.Duration) Option {
	return optionFunc(func(c *config) { c.batch.DeadlineMargin = d })
}

// WithDeadLetters sets where a record the Guard dead-letters goes: your
// own [DeadLetterer] ([DeadLetterQueue] is this for an SQS queue). Without
// either such a record is reported as a failure and stays on the queue
// (its redrive policy moves it on).
func WithDeadLetters(d DeadLetterer) Option {
	return optionFunc(func(c *config) {
		c.batch.DeadLetter = nil
		if d != nil {
			c.batch.DeadLetter = d.DeadLetter
		}
	})
}

// WithVisibility makes a record of a standard queue that is reported come
// back when it can succeed rather than after the queue's visibility
// timeout: when the Guard says how long to wait (a failed attempt's retry
// delay, the end of a lease another invocation holds), the function
// changes the record's visibility to that, through client, on the queue
// at queueURL (the queue of the event source mapping). A failed change is
// logged; the record then comes back after the visibility timeout. FIFO
// queues are left alone: their message groups wait for the record anyway.
func WithVisibility(client VisibilityChanger, queueURL string) Option {
	return optionFunc(func(c *config) { c.visibility = &visibility{client: client, url: queueURL} })
}

// WithGuardOptions passes options to the [consumer.Guard] the function
// runs (HandlerTimeout, MaxAttempts, Namespace, WithKeyFunc, hooks…).
// LeaseTTL still applies, but no lease outlives an invocation's deadline.
// The options of a Consumer's receive loop alone (consumer.Concurrency,
// MaxInFlight, ...) are not GuardOptions and do not compile here: use this
// package's Concurrency.
func WithGuardOptions(opts ...consumer.GuardOption) Option {
	return optionFunc(func(c *config) { c.batch.GuardOptions = append(c.batch.GuardOptions, opts...) })
}

// WithLogger sets the logger for what happens to records (default
// slog.Default(), as in every onceq package). It is handed to the Guard and
// the Store too, unless they were given their own
// (WithGuardOptions(consumer.WithLogger(other)) gives the Guard another).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.batch.Logger = l }) }

// DeadLetterer sends a record the Guard dead-lettered to a dead-letter
// destination; m.Handle holds the Lambda record (see [Record]). When
// DeadLetter returns nil the record counts as handled and is not reported;
// an error keeps it on the queue.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, m *consumer.Message, reason string) error
}

// DeadLetterFunc adapts a function to DeadLetterer.
type DeadLetterFunc func(ctx context.Context, m *consumer.Message, reason string) error

// DeadLetter calls f.
func (f DeadLetterFunc) DeadLetter(ctx context.Context, m *consumer.Message, reason string) error {
	return f(ctx, m, reason)
}
