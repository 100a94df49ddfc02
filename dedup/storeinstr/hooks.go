package storeinstr

import (
	"context"
	"time"

	"github.com/onceq/onceq/retry"
)

// Hook is an observer of a store, given to its WithHooks: every store's
// Hook is this type. It implements HookStoreCall, HookStoreRetry, or a
// hook interface of the store it is given to (dynamostore's
// HookDynamoCancellation, ...), one or several; the store's New refuses
// one that implements none. A store calls its hooks synchronously from
// concurrent goroutines, so they must be quick and safe for concurrent
// use (in the manner of franz-go's kgo hooks).
type Hook any

// HookStoreCall is told of every request a store sends to its database:
// the store operation (OpClaim, ...), the request's duration and its
// error (nil on success; a condition the database answers with an error,
// as DynamoDB does, is an error here too).
// A store calls its hooks synchronously from concurrent goroutines, so
// they must be quick and safe for concurrent use.
type HookStoreCall interface {
	OnStoreCall(ctx context.Context, op string, took time.Duration, err error)
}

// HookStoreRetry is told of every retried error, with its class and the
// database's error code ("" when there is none, e.g. a reset
// connection).
type HookStoreRetry interface {
	OnStoreRetry(ctx context.Context, op string, class retry.Class, errorCode string)
}
