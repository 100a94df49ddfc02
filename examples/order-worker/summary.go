package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/consumer"
)

// summary counts outcomes; it is a consumer.HookMessageOutcome, HookMessageSettled and
// HookPoolInFlight. Dead letters are counted when the dead-letter destination
// took them, not when they were decided.
type summary struct {
	processed, duplicates, rejected, failed, leaseLost, inFlightElsewhere, storeUnavailable atomic.Int64
	deadLettered, deadLetterFailed                                                          atomic.Int64
	inFlight                                                                                atomic.Int64
	// shipped and shippingDuplicates are the second stage's (-demo):
	// orders shipped, and re-sent events the shipping worker absorbed.
	shipped, shippingDuplicates atomic.Int64
	start                       time.Time
}

func (s *summary) OnMessageOutcome(_ context.Context, _ *consumer.Message, o consumer.Outcome, _ time.Duration) {
	switch o.Kind {
	case consumer.Processed:
		s.processed.Add(1)
	case consumer.Duplicate:
		s.duplicates.Add(1)
	case consumer.Rejected:
		s.rejected.Add(1)
	case consumer.Retrying:
		s.failed.Add(1)
	case consumer.LeaseLost:
		s.leaseLost.Add(1)
	case consumer.InFlightElsewhere:
		s.inFlightElsewhere.Add(1)
	case consumer.StoreUnavailable, consumer.Misconfigured:
		s.storeUnavailable.Add(1)
	}
}

func (s *summary) OnMessageSettled(_ context.Context, _ *consumer.Message, a consumer.Action, err error) {
	if a != consumer.DeadLetter {
		return
	}
	if err != nil {
		s.deadLetterFailed.Add(1)
		return
	}
	s.deadLettered.Add(1)
}

func (s *summary) OnPoolInFlight(n int) { s.inFlight.Store(int64(n)) }

// settled counts messages that reached a final outcome.
func (s *summary) settled() int64 {
	return s.processed.Load() + s.duplicates.Load() + s.rejected.Load() + s.deadLettered.Load()
}

// Summary is the one JSON line printed at the end.
type Summary struct {
	Processed    int64 `json:"processed"`
	Duplicates   int64 `json:"duplicates"`
	Rejected     int64 `json:"rejected"`
	DeadLettered int64 `json:"dead_lettered"`
	// DeadLetterFailed counts dead letters the destination did not take
	// (the message was kept).
	DeadLetterFailed int64 `json:"dead_letter_failed"`
	Failed           int64 `json:"failed"`
	LeaseLost        int64 `json:"lease_lost"`
	// StoreUnavailable counts messages held through a store outage.
	StoreUnavailable int64 `json:"store_unavailable"`
	// Shipped counts the orders the shipping worker shipped from the
	// order.reserved events (-demo): one per reserved (processed) order.
	Shipped int64 `json:"shipped"`
	// ShippingDuplicates counts re-sent events the shipping worker
	// absorbed.
	ShippingDuplicates int64 `json:"shipping_duplicates"`
}

func (s *summary) snapshot() Summary {
	return Summary{Processed: s.processed.Load(), Duplicates: s.duplicates.Load(), Rejected: s.rejected.Load(),
		DeadLettered: s.deadLettered.Load(), DeadLetterFailed: s.deadLetterFailed.Load(), Failed: s.failed.Load(),
		LeaseLost: s.leaseLost.Load(), StoreUnavailable: s.storeUnavailable.Load(),
		Shipped: s.shipped.Load(), ShippingDuplicates: s.shippingDuplicates.Load()}
}

func (s *summary) writeJSON(w io.Writer) error {
	b, err := json.Marshal(s.snapshot())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func (s *summary) progress(w io.Writer) {
	el := time.Since(s.start).Seconds()
	fmt.Fprintf(w, "order-worker: %.0f msg/s, processed %d, duplicates %d, rejected %d, dead-lettered %d, in flight %d\n",
		float64(s.settled())/max(el, 1e-9), s.processed.Load(), s.duplicates.Load(), s.rejected.Load(),
		s.deadLettered.Load(), s.inFlight.Load())
}
