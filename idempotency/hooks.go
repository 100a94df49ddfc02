package idempotency

import (
	"context"
	"time"
)

// Hook is an observer, as in package consumer: it must implement at least
// one of the interfaces below or consumer's (those are handed to the
// Guard Do runs on); it is called synchronously, so it must be quick and
// safe for concurrent use. Each interface is named after its one method:
// HookX has OnX. The key a hook is given may hold personal data: log its
// dedup.KeyHash, not the key.
type Hook any

// HookResponseReplayed sees every stored response given to a repeat
// instead of running the function again.
type HookResponseReplayed interface {
	OnResponseReplayed(ctx context.Context, key string, response []byte)
}

// HookKeyInProgress sees a repeat find an earlier call with its key
// still in progress, before it waits or fails with ErrInProgress: once
// per look, so a repeat that waits is seen at each look it takes.
type HookKeyInProgress interface {
	OnKeyInProgress(ctx context.Context, key string, retryAfter time.Duration)
}

type hooks struct {
	replayed   []HookResponseReplayed
	inProgress []HookKeyInProgress
}
