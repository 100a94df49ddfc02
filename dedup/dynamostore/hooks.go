package dynamostore

import (
	"context"
	"fmt"

	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/internal/hookset"
)

// Hook is an observer of the store. It must implement at least one of the
// interfaces below, or storeinstr.HookStoreCall (every DynamoDB request)
// or storeinstr.HookStoreRetry (every retry), which every store takes
// (New refuses one that implements none, so a misspelt method is an
// error, not silence); the store calls those it implements,
// synchronously from concurrent goroutines, so they must be quick and safe
// for concurrent use (in the manner of franz-go's kgo hooks).
type Hook any

// HookDynamoCancellation is told of every non-"None" reason of a cancelled
// transaction (e.g. "ConditionalCheckFailed").
type HookDynamoCancellation interface {
	OnDynamoCancellation(ctx context.Context, op, reason string)
}

// HookDynamoExpiredPresent is told when a claim took over an expired record
// that TTL had not yet deleted.
type HookDynamoExpiredPresent interface {
	OnDynamoExpiredPresent(ctx context.Context, op string)
}

type hooks struct {
	cancellation   []HookDynamoCancellation
	expiredPresent []HookDynamoExpiredPresent
}

// collectHooks sorts hs by the interfaces each implements; a hook that
// implements none is a configuration error.
func collectHooks(hs []Hook) (hooks, error) {
	var out hooks
	for _, h := range hs {
		// Not short-circuited: a hook may implement several.
		used := storeinstr.Uses(h)
		used = hookset.Add(&out.cancellation, h) || used
		used = hookset.Add(&out.expiredPresent, h) || used
		if !used {
			return hooks{}, fmt.Errorf("dynamostore: %w: %w", ErrInvalidConfig, hookset.Unused("dynamodb", h))
		}
	}
	return out, nil
}

func (h *hooks) onCancellation(ctx context.Context, op, reason string) {
	for _, x := range h.cancellation {
		x.OnDynamoCancellation(ctx, storeOp(op), reason)
	}
}

func (h *hooks) onExpiredPresent(ctx context.Context, op string) {
	for _, x := range h.expiredPresent {
		x.OnDynamoExpiredPresent(ctx, storeOp(op))
	}
}

// hookList is hs as storeinstr.Config takes them.
func hookList(hs []Hook) []any {
	out := make([]any, len(hs))
	for i, h := range hs {
		out[i] = h
	}
	return out
}
