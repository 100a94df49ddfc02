package consumer

import (
	"context"
	"time"

	"github.com/onceq/onceq/internal/hookset"
)

// Hook is an observer. It must implement at least one of the interfaces
// below (New refuses one that implements none, so a misspelt method is an
// error, not silence); the consumer calls those it implements,
// synchronously, so they must be quick and safe for concurrent use (in the
// manner of franz-go's kgo hooks). Each interface is named after its one
// method: HookX has OnX.
type Hook any

// HookMessageOutcome sees every message's outcome, exactly once per
// processing.
type HookMessageOutcome interface {
	OnMessageOutcome(ctx context.Context, m *Message, o Outcome, took time.Duration)
}

// HookMessageHandled sees every handler call.
type HookMessageHandled interface {
	OnMessageHandled(ctx context.Context, m *Message, took time.Duration, err error)
}

// HookMessageSettled sees every source action and its error.
type HookMessageSettled interface {
	OnMessageSettled(ctx context.Context, m *Message, a Action, err error)
}

// HookPoolInFlight sees the count of held messages change.
type HookPoolInFlight interface {
	OnPoolInFlight(n int)
}

// HookMessageHeartbeat sees every heartbeat: an extension of a held
// message's lease in the store (lease true), renewed while its handler
// runs, or of its delivery at the source (lease false), extended while the
// consumer holds it.
type HookMessageHeartbeat interface {
	OnMessageHeartbeat(ctx context.Context, m *Message, lease bool, err error)
}

// HookClaimExpiredPresent sees a claim that took over an expired record
// still stored (TTL lag: DynamoDB deletes expired items up to 48 hours late).
type HookClaimExpiredPresent interface {
	OnClaimExpiredPresent(ctx context.Context, m *Message, previous string)
}

// HookPoolConcurrencyLimit sees the adaptive concurrency limit change.
type HookPoolConcurrencyLimit interface {
	OnPoolConcurrencyLimit(n int)
}

type hooks struct {
	limit     []HookPoolConcurrencyLimit
	outcome   []HookMessageOutcome
	handler   []HookMessageHandled
	settle    []HookMessageSettled
	inFlight  []HookPoolInFlight
	heartbeat []HookMessageHeartbeat
	expired   []HookClaimExpiredPresent
}

// collectHooks sorts hs by the interfaces each implements; a hook that
// implements none is a configuration error.
func collectHooks(hs []Hook) (hooks, error) {
	var out hooks
	err := hookset.Collect("consumer", ErrInvalidConfig, hs,
		hookset.Into(&out.outcome), hookset.Into(&out.handler), hookset.Into(&out.settle),
		hookset.Into(&out.inFlight), hookset.Into(&out.heartbeat), hookset.Into(&out.limit),
		hookset.Into(&out.expired))
	return out, err
}
