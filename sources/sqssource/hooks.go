package sqssource

import (
	"context"
	"time"

	"github.com/onceq/onceq/internal/hookset"
	"github.com/onceq/onceq/retry"
)

// Hook is an observer of the source, in the manner of franz-go's kgo
// hooks. It must implement at least one of the interfaces below: New
// refuses one that implements none, so a misspelt method is an error, not
// silence. Hooks are called synchronously from the source's goroutines:
// keep them cheap and safe for concurrent use.
type Hook any

// HookSQSDeleteFailed sees an ack that could not be carried out. A lost
// receipt handle (visibility ran out first) is reported with
// [ErrDeliveryLost]; the message comes back and dedup recognises it.
type HookSQSDeleteFailed interface {
	OnSQSDeleteFailed(ctx context.Context, messageID string, err error)
}

// HookSQSVisibilityExtended sees Extend move a delivery's deadline to d from
// now.
type HookSQSVisibilityExtended interface {
	OnSQSVisibilityExtended(ctx context.Context, messageID string, d time.Duration)
}

// HookSQSDeadLetter sees a message sent to the dead-letter queue; a failed
// send is not reported here.
type HookSQSDeadLetter interface {
	OnSQSDeadLetter(ctx context.Context, messageID, reason string)
}

// HookSQSRetry sees a call to SQS fail and be retried. The SDK's own retryer
// is switched off for the calls this source retries, so every throttle
// passes through here.
type HookSQSRetry interface {
	OnSQSRetry(ctx context.Context, op string, class retry.Class, err error)
}

type hooks struct {
	deleteFailed []HookSQSDeleteFailed
	extended     []HookSQSVisibilityExtended
	deadLetter   []HookSQSDeadLetter
	retry        []HookSQSRetry
}

// collectHooks sorts hs by the interfaces each implements; a hook that
// implements none is a configuration error.
func collectHooks(hs []Hook) (hooks, error) {
	var out hooks
	err := hookset.Collect("sqs", ErrInvalidConfig, hs,
		hookset.Into(&out.deleteFailed), hookset.Into(&out.extended),
		hookset.Into(&out.deadLetter), hookset.Into(&out.retry))
	return out, err
}
