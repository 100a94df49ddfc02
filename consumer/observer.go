package consumer

import (
	"context"
	"fmt"
)

// observer is where the consumer's telemetry and hooks meet. It is built
// once, with the Guard, and handed to the settle stage and the pool: each
// reports what it does itself (the Guard its outcomes, handler calls and
// lease renewals; the settle stage its Source calls; the pool its counts).
type observer struct {
	tel   *telemetry
	hooks hooks
	// mon is the health the store calls and outcomes report to.
	mon *monitor
}

func newObserver(cfg *config) (*observer, error) {
	tel, err := newTelemetry(cfg.tracerProvider, cfg.meterProvider, cfg.propagator)
	if err != nil {
		return nil, fmt.Errorf("consumer: telemetry: %w", err)
	}
	hs, err := collectHooks(cfg.hooks)
	if err != nil {
		return nil, err
	}
	return &observer{tel: tel, hooks: hs}, nil
}

// heartbeat reports an extension of m's lease in the store (lease) or of
// its delivery at the source.
func (o *observer) heartbeat(ctx context.Context, m *Message, lease bool, err error) {
	o.tel.heartbeat(ctx, lease, err)
	for _, h := range o.hooks.heartbeat {
		h.OnMessageHeartbeat(ctx, m, lease, err)
	}
}

// settled reports a Source action on m and its error.
func (o *observer) settled(ctx context.Context, m *Message, a Action, err error) {
	o.tel.settled(ctx, m, a, err)
	for _, h := range o.hooks.settle {
		h.OnMessageSettled(ctx, m, a, err)
	}
}

// inFlight reports the count of held messages.
func (o *observer) inFlight(n int) {
	o.tel.inFlight.Record(context.Background(), int64(n))
	for _, h := range o.hooks.inFlight {
		h.OnPoolInFlight(n)
	}
}

// limit reports the adaptive concurrency limit.
func (o *observer) limit(n int) {
	o.tel.limit.Record(context.Background(), int64(n))
	for _, h := range o.hooks.limit {
		h.OnPoolConcurrencyLimit(n)
	}
}
