package sqssource

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/retry"
)

// Option configures a Source; pass them to New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	waitTime       time.Duration
	pollers        int
	visibility     time.Duration // 0: the queue's attribute
	dlqURL         string
	flushInterval  time.Duration
	deleteWorkers  int
	logger         *slog.Logger
	hooks          []Hook
	policy         retry.Policy
	emptyPollPause time.Duration
	meter          metric.MeterProvider
}

func defaultConfig() config {
	return config{
		waitTime:       20 * time.Second,
		pollers:        2,
		flushInterval:  20 * time.Millisecond,
		deleteWorkers:  4,
		emptyPollPause: 100 * time.Millisecond,
	}
}

// WaitTime is the long-polling wait of each ReceiveMessage, 0 to 20s in
// whole seconds. Default 20s. With 0 (short polling) a poller pauses 100ms
// after an empty answer rather than spinning.
func WaitTime(d time.Duration) Option { return optionFunc(func(c *config) { c.waitTime = d }) }

// Pollers is how many ReceiveMessage loops run at once. Default 2. They
// poll only while a Receive call is waiting for messages.
func Pollers(n int) Option { return optionFunc(func(c *config) { c.pollers = n }) }

// VisibilityTimeout asks SQS to hide each received message for d (whole
// seconds, 1s to 12h). Default: the queue's VisibilityTimeout attribute.
func VisibilityTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.visibility = d })
}

// DeadLetterQueue is the URL DeadLetter sends to. Default: the queue of
// the source queue's RedrivePolicy, if it has one.
func DeadLetterQueue(url string) Option { return optionFunc(func(c *config) { c.dlqURL = url }) }

// DeleteFlushInterval is how long an ack may wait for nine others before
// its DeleteMessageBatch is sent anyway. Default 20ms.
func DeleteFlushInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.flushInterval = d })
}

// DeleteConcurrency is how many DeleteMessageBatch calls may be in flight
// at once. Default 4.
func DeleteConcurrency(n int) Option { return optionFunc(func(c *config) { c.deleteWorkers = n }) }

// WithLogger sets where the source logs (when given none, the logger of the Consumer that runs it, else
// slog.Default(); nil counts as none).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithHooks adds observers; each must implement at least one of
// [HookSQSDeleteFailed], [HookSQSVisibilityExtended], [HookSQSDeadLetter] and
// [HookSQSRetry].
func WithHooks(hooks ...Hook) Option {
	return optionFunc(func(c *config) { c.hooks = append(c.hooks, hooks...) })
}

// WithMeterProvider sets where the source's metrics go (default the global
// MeterProvider): onceq.sqs.visibility_changes, .dead_letters,
// .delete_batches and .delete_failures.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meter = mp })
}

// WithRetryPolicy sets how failed SQS calls (deletes, visibility changes,
// dead-letter sends) are retried. Default retry.DefaultPolicy().
func WithRetryPolicy(p retry.Policy) Option { return optionFunc(func(c *config) { c.policy = p }) }

func (c *config) validate() error {
	switch {
	case c.waitTime < 0 || c.waitTime > 20*time.Second || c.waitTime%time.Second != 0:
		return invalidOption("WaitTime %v: want whole seconds from 0 to 20s", c.waitTime)
	case c.pollers < 1:
		return invalidOption("Pollers %d: want at least 1", c.pollers)
	case c.visibility != 0 && (c.visibility < time.Second || c.visibility > maxVisibility || c.visibility%time.Second != 0):
		return invalidOption("VisibilityTimeout %v: want whole seconds from 1s to 12h", c.visibility)
	case c.flushInterval <= 0:
		return invalidOption("DeleteFlushInterval %v: want > 0", c.flushInterval)
	case c.deleteWorkers < 1:
		return invalidOption("DeleteConcurrency %d: want at least 1", c.deleteWorkers)
	}
	return nil
}
