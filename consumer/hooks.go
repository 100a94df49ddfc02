package consumer

import (
	"context"
	"time"
)

// Hook is an observer. It may implement any of the interfaces below; the
// consumer calls those it implements, synchronously, so they must be quick
// and safe for concurrent use (in the manner of franz-go's kgo hooks).
type Hook any

// OutcomeHook sees every message's outcome, exactly once per processing.
type OutcomeHook interface {
	OnOutcome(ctx context.Context, m *Message, o Outcome, took time.Duration)
}

// HandlerHook sees every handler call.
type HandlerHook interface {
	OnHandled(ctx context.Context, m *Message, took time.Duration, err error)
}

// SettleHook sees every source action and its error.
type SettleHook interface {
	OnSettled(ctx context.Context, m *Message, a Action, err error)
}

// InFlightHook sees the count of held messages change.
type InFlightHook interface {
	OnInFlight(n int)
}

// HeartbeatHook sees every lease or visibility extension.
type HeartbeatHook interface {
	OnHeartbeat(ctx context.Context, m *Message, lease bool, err error)
}

// ExpiredPresentHook sees a claim that took over an expired record still
// stored (TTL lag): the seed's dynamo_ttl_delete_before_retry_total.
type ExpiredPresentHook interface {
	OnExpiredPresent(ctx context.Context, m *Message, previous string)
}

// LimitHook sees the adaptive concurrency limit change.
type LimitHook interface {
	OnConcurrencyLimit(n int)
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

func collectHooks(hs []Hook) hooks {
	var out hooks
	for _, h := range hs {
		if x, ok := h.(OutcomeHook); ok {
			out.outcome = append(out.outcome, x)
		}
		if x, ok := h.(HandlerHook); ok {
			out.handler = append(out.handler, x)
		}
		if x, ok := h.(SettleHook); ok {
			out.settle = append(out.settle, x)
		}
		if x, ok := h.(InFlightHook); ok {
			out.inFlight = append(out.inFlight, x)
		}
		if x, ok := h.(HeartbeatHook); ok {
			out.heartbeat = append(out.heartbeat, x)
		}
		if x, ok := h.(LimitHook); ok {
			out.limit = append(out.limit, x)
		}
		if x, ok := h.(ExpiredPresentHook); ok {
			out.expired = append(out.expired, x)
		}
	}
	return out
}
