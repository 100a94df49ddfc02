package dynamostore

import (
	"context"

	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/internal/hookset"
)

// Hook is an observer of the store, given to WithHooks: it implements
// one or more of the interfaces below, storeinstr.HookStoreCall (every
// DynamoDB request) or storeinstr.HookStoreRetry (every retry). It is
// every store's Hook (storeinstr.Hook), so one observer serves them all;
// New refuses one that implements none, so a misspelt method is an error,
// not silence. The store calls those it implements, synchronously from
// concurrent goroutines, so they must be quick and safe for concurrent
// use (in the manner of franz-go's kgo hooks).
type Hook = storeinstr.Hook

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

// sorters sort hooks into h's lists, for storeinstr.Config.Own.
func (h *hooks) sorters() []func(any) bool {
	return []func(any) bool{hookset.Into(&h.cancellation), hookset.Into(&h.expiredPresent)}
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
