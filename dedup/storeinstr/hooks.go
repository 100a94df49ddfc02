package storeinstr

import (
	"context"
	"time"

	"github.com/onceq/onceq/retry"
)

// StoreCallHook is told of every request a store sends to its database:
// the store operation (OpClaim, ...), the request's duration and its
// error (nil on success; a condition that said no is an error here too).
// A store calls its hooks synchronously from concurrent goroutines, so
// they must be quick and safe for concurrent use.
type StoreCallHook interface {
	OnStoreCall(ctx context.Context, op string, took time.Duration, err error)
}

// StoreRetryHook is told of every retried error, with its class and the
// database's error code ("" when there is none, e.g. a reset
// connection).
type StoreRetryHook interface {
	OnStoreRetry(ctx context.Context, op string, class retry.Class, errorCode string)
}
