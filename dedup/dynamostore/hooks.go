package dynamostore

import (
	"context"
	"fmt"
	"time"

	"github.com/onceq/onceq/internal/hookset"
	"github.com/onceq/onceq/retry"
)

// Hook is an observer of the store. It must implement at least one of the
// interfaces below (New refuses one that implements none, so a misspelt
// method is an error, not silence); the store calls those it implements,
// synchronously from concurrent goroutines, so they must be quick and safe
// for concurrent use (in the manner of franz-go's kgo hooks).
type Hook any

// CallHook is told of every DynamoDB request: the store operation
// ("Claim", "Complete", ...), its duration and its error (nil on success;
// a condition failure is an error here too).
type CallHook interface {
	OnDynamoCall(ctx context.Context, op string, took time.Duration, err error)
}

// RetryHook is told of every retried error, with its class and DynamoDB
// error code ("" when there is none, e.g. a reset).
type RetryHook interface {
	OnDynamoRetry(ctx context.Context, op string, class retry.Class, errorCode string)
}

// CancellationHook is told of every non-"None" reason of a cancelled
// transaction (e.g. "ConditionalCheckFailed").
type CancellationHook interface {
	OnDynamoCancellation(ctx context.Context, op, reason string)
}

// ExpiredPresentHook is told when a claim took over an expired record
// that TTL had not yet deleted.
type ExpiredPresentHook interface {
	OnDynamoExpiredPresent(ctx context.Context, op string)
}

type hooks struct {
	call           []CallHook
	retry          []RetryHook
	cancellation   []CancellationHook
	expiredPresent []ExpiredPresentHook
}

// collectHooks sorts hs by the interfaces each implements; a hook that
// implements none is a configuration error.
func collectHooks(hs []Hook) (hooks, error) {
	var out hooks
	for _, h := range hs {
		// Not short-circuited: a hook may implement several.
		used := hookset.Add(&out.call, h)
		used = hookset.Add(&out.retry, h) || used
		used = hookset.Add(&out.cancellation, h) || used
		used = hookset.Add(&out.expiredPresent, h) || used
		if !used {
			return hooks{}, fmt.Errorf("dynamostore: %w: %w", ErrInvalidConfig, hookset.Unused("dynamodb", h))
		}
	}
	return out, nil
}

func (h *hooks) onCall(ctx context.Context, op string, d time.Duration, err error) {
	for _, x := range h.call {
		x.OnDynamoCall(ctx, op, d, err)
	}
}

func (h *hooks) onRetry(ctx context.Context, op string, c retry.Class, code string) {
	for _, x := range h.retry {
		x.OnDynamoRetry(ctx, op, c, code)
	}
}

func (h *hooks) onCancellation(ctx context.Context, op, reason string) {
	for _, x := range h.cancellation {
		x.OnDynamoCancellation(ctx, op, reason)
	}
}

func (h *hooks) onExpiredPresent(ctx context.Context, op string) {
	for _, x := range h.expiredPresent {
		x.OnDynamoExpiredPresent(ctx, op)
	}
}
