package awslambda

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/configerr"
)

// ErrInvalidConfig is wrapped by every error New* returns for a wrong
// option. It is the ErrInvalidConfig of every onceq package: errors.Is with
// any of them matches.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// Option configures a function built with [NewSQS] or [NewKafka].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	concurrency int
	margin      time.Duration
	deadLetters DeadLetterer
	visibility  *visibility
	guardOpts   []consumer.GuardOption
	logger      *slog.Logger
}

// DefaultDeadlineMargin is DeadlineMargin's default.
const DefaultDeadlineMargin = time.Second

func defaultConfig() config {
	return config{concurrency: 10, margin: DefaultDeadlineMargin}
}

func (c *config) validate() error {
	switch {
	case c.concurrency < 1:
		return fmt.Errorf("awslambda: %w: Concurrency %d: must be at least 1", ErrInvalidConfig, c.concurrency)
	case c.margin < time.Second:
		// Leases end on whole seconds: a margin under one second could let
		// a handler run past the lease it was given.
		return fmt.Errorf("awslambda: %w: DeadlineMargin %v: must be at least 1s", ErrInvalidConfig, c.margin)
	}
	return nil
}

// Concurrency bounds how many records of one batch run at once (default
// 10): records of a standard SQS queue, FIFO message groups, Kafka
// partitions.
func Concurrency(n int) Option { return optionFunc(func(c *config) { c.concurrency = n }) }

// DeadlineMargin is how long before the invocation's deadline handlers are
// stopped and no record is started any more (default 1s, at least 1s). It
// leaves time to commit the last results, send dead letters and answer
// before Lambda stops the function; calls still in flight 250ms before the
// deadline are cancelled and their records reported as failures.
func DeadlineMargin(d time.Duration) Option { return optionFunc(func(c *config) { c.margin = d }) }

// WithDeadLetters sets where a record the Guard dead-letters goes:
// [SQSQueue], [KafkaTopic], or your own [DeadLetterer]. Without it such a
// record is reported as a failure and stays with the event source.
func WithDeadLetters(d DeadLetterer) Option {
	return optionFunc(func(c *config) { c.deadLetters = d })
}

// WithVisibility makes a record of a standard SQS queue that is reported
// come back when it can succeed rather than after the queue's visibility
// timeout: when the Guard says how long to wait (a failed attempt's retry
// delay, the end of a lease another invocation holds), the function
// changes the record's visibility to that, through client, on the queue
// at queueURL (the queue of the event source mapping). A failed change is
// logged; the record then comes back after the visibility timeout. FIFO
// queues are left alone: their message groups wait for the record anyway.
func WithVisibility(client SQSVisibilityChanger, queueURL string) Option {
	return optionFunc(func(c *config) { c.visibility = &visibility{client: client, url: queueURL} })
}

// WithGuardOptions passes options to the [consumer.Guard] the function
// runs (HandlerTimeout, MaxAttempts, Namespace, WithKeyFunc, hooks…).
// LeaseTTL still applies, but no lease outlives an invocation's deadline.
// The options of a Consumer's receive loop alone (consumer.Concurrency,
// MaxInFlight, ...) are not GuardOptions and do not compile here: use this
// package's Concurrency.
func WithGuardOptions(opts ...consumer.GuardOption) Option {
	return optionFunc(func(c *config) { c.guardOpts = append(c.guardOpts, opts...) })
}

// WithLogger sets the logger for what happens to records (default
// slog.Default(), as in every onceq package). It is handed to the Guard and
// the Store too, unless they were given their own
// (WithGuardOptions(consumer.WithLogger(other)) gives the Guard another).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }
