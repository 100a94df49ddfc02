package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/retry"
)

// Consumer runs a Handler over a Source through a Guard.
type Consumer struct {
	cfg     config
	src     Source
	guard   *Guard
	caps    Capabilities
	started atomic.Bool
	// obs is the Guard's observer, handed to the pool and its settle
	// stage so that they report to the same telemetry and hooks.
	obs *observer
	// mon is the run's health and the log lines of its waits.
	mon *monitor
	// limiter is the running pool's, which the throttles the Store and
	// the Source retry reach (observe); nil until Run, and with
	// WithoutAdaptiveConcurrency.
	limiter atomic.Pointer[limiter]
}

// New validates the options and returns a Consumer. Run starts it. New
// reads the Source's and the Store's Capabilities once each, and attaches
// both (broker.Runtime, dedup.Runtime): the logger given with WithLogger,
// the throttle observer of its adaptive concurrency, and for the Source
// the commit-hold bound, 3/4 of Retention.
func New(src Source, store dedup.Store, h Handler, opts ...Option) (*Consumer, error) {
	if src == nil {
		return nil, configError("a Source is required")
	}
	cfg := newConfig(opts)
	caps, err := capabilities("Source", src.Capabilities)
	if err != nil {
		return nil, err
	}
	src = safeSource{s: src, log: cfg.logger}
	if !caps.DeadLetter && !cfg.noDeadLetter {
		return nil, configError("the Source has no dead-letter destination: give it one (SQS: a dead-letter queue or redrive policy; Kafka: a dead-letter topic), or pass WithoutDeadLetters")
	}
	if caps.DefaultKey == KeyFromRecord && cfg.keyFunc == nil {
		cfg.keyFunc, cfg.keyCoversBody = broker.Fingerprint, broker.FingerprintCoversBody
	}
	if window := caps.RedeliveryWindow; window > 0 {
		if !cfg.retentionSet && cfg.retention <= window {
			// A duplicate may arrive as late as the source redelivers, so
			// the record must outlive that; said once, since inspect and
			// the table will show the longer expiry.
			cfg.retention = window + time.Hour
			cfg.logger.Info("completed records kept longer than the default retention, to outlive the source's redelivery window",
				slog.Duration("retention", cfg.retention), slog.Duration("redelivery_window", window))
		}
		if cfg.retention <= window {
			return nil, configError("Retention %v: the source may redeliver for %v, so a late duplicate would run again",
				cfg.retention, window)
		}
	}
	if err := cfg.checkHealth(); err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, src: src, caps: caps}
	g, err := newGuard(cfg, store, h, c.observe)
	if err != nil {
		return nil, err
	}
	c.guard, c.obs, c.mon = g, g.obs, g.obs.mon
	// Records completed behind a held message expire Retention after they
	// completed; stopping at 3/4 of it leaves the operator a quarter of
	// Retention to mend what holds it before a restart would replay them
	// as new.
	rt := broker.Runtime{Logger: cfg.givenLogger(), CommitHold: cfg.retention / 4 * 3, Observe: c.observe,
		Status: func(s broker.Status) { c.mon.brokerStatus(s, time.Now()) }}
	if err := attach("Source", func() { src.Attach(rt) }); err != nil {
		return nil, err
	}
	return c, nil
}

// observe is the Source's and the Store's retry observer: a throttle
// lowers the running pool's concurrency.
func (c *Consumer) observe(class retry.Class, _ error) {
	if class != retry.Throttled {
		return
	}
	if l := c.limiter.Load(); l != nil {
		l.throttled(time.Now())
	}
}

// Run checks the Store and the Source (see Check), then receives and
// processes messages until ctx is cancelled, the source closes, or a
// configuration fault stops it. On stopping it stops receiving, gives
// in-flight handlers up to DrainTimeout, settles what they finished, gives
// back what never started and closes the Source. It returns nil after a
// cancel, or the error that stopped it: one wrapping ErrMisconfigured for
// a fault of the deployment. A Consumer runs once.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	c.mon.setState(stateChecking)
	defer c.mon.setState(stateStopped)
	if err := c.Check(ctx); err != nil {
		closeIn := c.cfg.drainTimeout
		if ctx.Err() != nil {
			closeIn = min(closeIn, stopGrace) // a stop: the source never received
		}
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeIn)
		defer cancel()
		_ = c.src.Close(closeCtx)
		if ctx.Err() != nil {
			return nil // cancelled while checking: a stop, not a fault
		}
		return err
	}
	return newPool(c).serve(ctx)
}

// checkStore runs the Guard's check until it passes, fails for a reason
// other than the store's being down for the moment, or CheckTimeout has
// passed.
func (c *Consumer) checkStore(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.checkTimeout)
	defer cancel()
	// last is the last failure of the moment: what CheckTimeout ending the
	// retries reports, rather than the deadline alone.
	var last error
	for {
		what, err := c.guard.checkStore(ctx)
		// Health shows a store failing its start-up check as unavailable,
		// as it shows an outage met later.
		c.mon.storeCalled(err, time.Now())
		if err == nil {
			return nil
		}
		retryable := false
		switch retry.Classify(err) {
		case retry.Transient, retry.Throttled:
			retryable = ctx.Err() == nil
		}
		if !retryable {
			if last != nil && ctx.Err() != nil {
				return fmt.Errorf("%w: %s: %w (CheckTimeout %v ran out; it failed before with: %w)", ErrMisconfigured, what, err, c.cfg.checkTimeout, last)
			}
			return fmt.Errorf("%w: %s: %w", ErrMisconfigured, what, err)
		}
		last = err
		c.cfg.logger.WarnContext(ctx, "the store's start-up check failed for the moment; checking again", "check", what, slogErr(err))
		t := time.NewTimer(time.Second)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %s: %w (checked until CheckTimeout %v ran out)", ErrMisconfigured, what, err, c.cfg.checkTimeout)
		}
	}
}

// Check runs the Store's and the Source's checks (the table exists with the
// right layout, the queue or topic and the dead-letter destination can be
// reached), each bounded by CheckTimeout. An error wraps ErrMisconfigured.
// Run calls it before the first receive.
//
// A store that answers with a fault of the moment (a 5xx, a throttle, a
// reset) is checked again, a second apart, until CheckTimeout: one
// failed request at start-up is an outage, not a wrong deployment.
func (c *Consumer) Check(ctx context.Context) error {
	if err := c.checkStore(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.checkTimeout)
	defer cancel()
	if err := c.src.Check(ctx); err != nil {
		return fmt.Errorf("%w: source: %w", ErrMisconfigured, err)
	}
	return nil
}
