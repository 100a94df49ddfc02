// Package waitlog says, while a source waits on its broker or endpoint at
// start, what it waits on and for how long: no wait at start is silent.
// It imports no client library, so that every source can use it without
// linking another's.
package waitlog

import (
	"context"
	"log/slog"
	"time"
)

// Every is how often a wait at start is said.
const Every = 10 * time.Second

// Say logs msg, with what it waits on (attr: the brokers, an SQS queue)
// and the time waited, every Every until the returned stop is called or
// ctx ends.
func Say(ctx context.Context, log *slog.Logger, msg string, attr slog.Attr) (stop func()) {
	start := time.Now()
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(Every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				log.WarnContext(ctx, msg, attr, slog.Duration("waited", time.Since(start).Round(time.Second)))
			}
		}
	}()
	return func() { close(done); <-ended }
}
