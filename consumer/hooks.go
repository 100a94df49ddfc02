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
// manner of franz-go's kgo hooks).
type Hook any

// OutcomeHook sees every message's outcome, exactly once per processing.
type OutcomeHook interface {
	OnMessageOutcome(ctx context.Context, m *Message, o Outcome, took time.Duration)
}

// HandlerHook sees every handler call.
type HandlerHook interface {
	OnMessageHandled(ctx context.Context, m *Message, took time.Duration, err error)
}

// SettleHook sees every source action and its error.
type SettleHook interface {
	OnMessageSettled(ctx context.Context, m *Message, a Action, err error)
}

// InFlightHook sees the count of held messages change.
type InFlightHook interface {
	OnPoolInFlight(n int)
}

// HeartbeatHook sees every lease or visibility extension.
type HeartbeatHook interface {
	OnMessageHeartbeat(ctx context.Context, m *Message, lease bool, err error)
}

// ExpiredPresentHook sees a claim that took over an expired record still
// stored (TTL lag: DynamoDB deletes expired items up to 48 hours late).
type ExpiredPresentHook interface {
	OnClaimExpiredPresent(ctx context.Context, m *Message, previous string)
}

// LimitHook sees the adaptive concurrency limit change.
type LimitHook interface {
	OnPoolConcurrencyLimit(n int)
}

type hooks struct {
	limit     []LimitHook
	outcome   []OutcomeHook
	handler   []HandlerHook
	settle    []SettleHook
	inFlight  []InFlightHook
	heartbeat []HeartbeatHook
	expired   []ExpiredPresentHook
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
