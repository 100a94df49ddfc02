package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/memsource"
)

// reservedEvent is the type of the event a reserved order sends onward.
const reservedEvent = "order.reserved"

// shipOnward sends an order.reserved event to dest for each order h
// reserves, through the outbox: the event commits with the order's
// COMPLETED record, so a duplicate order sends none and a rejected one
// none at all.
func shipOnward(h consumer.Handler, dest string) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		res, err := h.Handle(ctx, m)
		if err != nil || string(res.Response) != string(reservedResponse) {
			return res, err
		}
		o, err := parseOrder(m.Body) // h parsed it already
		if err != nil {
			return consumer.Result{}, consumer.Permanent(err)
		}
		body, err := json.Marshal(reservedEventBody{reservedEvent, o})
		if err != nil {
			return consumer.Result{}, err
		}
		res.Outbox = []outbox.Message{{Destination: dest, OrderingKey: o.OrderID, Body: body,
			Headers: map[string]string{"event-type": reservedEvent}}}
		return res, nil
	})
}

// shipping is the second stage: a relay sends the order.reserved events
// from the order worker's outbox to an in-process queue, which a second
// onceq consumer (the shipping worker, with a store of its own) reads,
// shipping each order once.
type shipping struct {
	queue   *memsource.Queue
	mu      sync.Mutex
	shipped map[string]int // by order ID: shipments committed
	// processed and duplicates are the shipping consumer's outcomes.
	processed, duplicates atomic.Int64
	stop                  func() error
}

// startShipping runs the relay over ob and the shipping worker until
// stop is called.
func startShipping(ctx context.Context, ob outbox.Store, logger *slog.Logger, meters metric.MeterProvider) (*shipping, error) {
	queue, err := memsource.NewQueue("shipping")
	if err != nil {
		return nil, err
	}
	sender, err := memsource.NewSender(queue)
	if err != nil {
		return nil, err
	}
	s := &shipping{queue: queue, shipped: map[string]int{}}
	opts := []outbox.Option{outbox.PollInterval(20 * time.Millisecond), outbox.WithLogger(logger), outbox.WithMeterProvider(meters)}
	if n, ok := ob.(interface{ Wait(context.Context) error }); ok {
		// A store that notifies (PostgreSQL's LISTEN) wakes the relay
		// as each commit lands.
		opts = append(opts, outbox.WakeOn(n.Wait))
	}
	relay, err := outbox.NewRelay(ob, sender, opts...)
	if err != nil {
		return nil, err
	}
	ship := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		o, err := parseReserved(m.Body)
		if err != nil {
			return consumer.Result{}, err
		}
		return consumer.Result{Writes: []dedup.Write{memstore.Write{Apply: func() {
			s.mu.Lock()
			s.shipped[o.OrderID]++
			s.mu.Unlock()
		}}}}, nil
	})
	store, err := memstore.New()
	if err != nil {
		return nil, err
	}
	worker, err := consumer.New(s.queue.Source(), store, ship, consumer.Concurrency(16),
		consumer.WithLogger(logger), consumer.WithHooks(s), consumer.WithMeterProvider(meters))
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	errs := make(chan error, 2)
	go func() { errs <- relay.Run(runCtx) }()
	go func() { errs <- worker.Run(runCtx) }()
	var once sync.Once
	var stopErr error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			stopErr = errors.Join(<-errs, <-errs)
			if c, ok := ob.(interface{ Close(context.Context) error }); ok {
				// The connection the wake signal listened on.
				stopErr = errors.Join(stopErr, c.Close(context.WithoutCancel(ctx)))
			}
		})
		return stopErr
	}
	return s, nil
}

// OnMessageOutcome counts the shipping worker's outcomes.
func (s *shipping) OnMessageOutcome(_ context.Context, _ *consumer.Message, o consumer.Outcome, _ time.Duration) {
	switch o.Kind {
	case consumer.Processed:
		s.processed.Add(1)
	case consumer.Duplicate:
		s.duplicates.Add(1)
	}
}

// counts returns how many orders were shipped, and the most shipments
// any one order got.
func (s *shipping) counts() (orders int, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.shipped {
		most = max(most, n)
	}
	return len(s.shipped), most
}

// await waits until want orders have shipped, ctx ends or within passes.
func (s *shipping) await(ctx context.Context, want int64, within time.Duration) {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if n, _ := s.counts(); int64(n) >= want {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// outboxOf is the outbox of a store that commits outgoing messages: the
// relay's view its Capabilities hand over.
func outboxOf(store dedup.Store) (outbox.Store, bool) {
	ob := store.Capabilities().Outbox
	return ob, ob != nil
}

// report prints the second stage's line.
func (s *shipping) report(w io.Writer, reserved int64) {
	orders, most := s.counts()
	fmt.Fprintf(w, "order-worker: shipping shipped %d of %d reserved orders (at most %d shipment per order), %d re-sent events absorbed as duplicates\n",
		orders, reserved, most, s.duplicates.Load())
}
