package memsource

import (
	"context"
	"fmt"
	"maps"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/outbox"
)

// Sender is an outbox.Sender that sends to in-process queues, each by its
// name (the entry's Destination). Each message carries the entry's ID as
// its idempotency-key attribute, so an onceq consumer of the queue takes a
// re-dispatched copy as a duplicate, and the entry's OrderingKey as its
// key (its FIFO group on an ordered queue).
type Sender struct {
	queues map[string]*Queue
}

// NewSender returns a Sender to queues. A nil queue, or two queues of one
// name (an entry could reach only one of them), is refused with an error
// wrapping ErrInvalidConfig.
func NewSender(queues ...*Queue) (*Sender, error) {
	s := &Sender{queues: make(map[string]*Queue, len(queues))}
	for i, q := range queues {
		switch {
		case q == nil:
			return nil, fmt.Errorf("memsource: %w: NewSender: queue %d is nil", ErrInvalidConfig, i)
		case s.queues[q.name] != nil:
			return nil, fmt.Errorf("memsource: %w: NewSender: two queues named %q", ErrInvalidConfig, q.name)
		}
		s.queues[q.name] = q
	}
	return s, nil
}

// Name is the queue's name: the Destination that a Sender sends to it.
func (q *Queue) Name() string { return q.name }

// Send implements outbox.Sender. An entry no destination can take
// (outbox.Refusal) or for a queue the Sender does not know is refused
// (outbox.RefusedError).
func (s *Sender) Send(ctx context.Context, entries []outbox.Entry) []error {
	errs := make([]error, len(entries))
	for i, e := range entries {
		if errs[i] = outbox.Refusal(&e); errs[i] != nil {
			continue
		}
		q := s.queues[e.Destination]
		if q == nil {
			errs[i] = &outbox.RefusedError{Destination: e.Destination, Reason: "no such queue"}
			continue
		}
		attrs := make(map[string]string, len(e.Headers)+1)
		maps.Copy(attrs, e.Headers)
		attrs[broker.IdempotencyKeyAttribute] = e.ID
		errs[i] = q.Send(ctx, Outgoing{Key: e.OrderingKey, Body: e.Body, Attributes: attrs})
	}
	return errs
}
