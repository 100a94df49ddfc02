package sourcetest

import (
	"context"
	"sync"

	"github.com/onceq/onceq/broker"
)

// Wrapped is a pass-through decorator of the kind users write to count or
// log deliveries: it embeds the Source and overrides Receive and Ack only.
// Everything else, Capabilities included, reaches the Source it wraps
// through the embedding, so the consumer must treat a Wrapped exactly as
// the Source itself.
type Wrapped struct {
	broker.Source

	mu         sync.Mutex
	deliveries map[string]int // by message ID
	acks       int
}

// Wrap decorates src.
func Wrap(src broker.Source) *Wrapped {
	return &Wrapped{Source: src, deliveries: map[string]int{}}
}

// Receive counts each delivery by message ID.
func (w *Wrapped) Receive(ctx context.Context, max int) ([]*broker.Message, error) {
	msgs, err := w.Source.Receive(ctx, max)
	w.mu.Lock()
	for _, m := range msgs {
		w.deliveries[m.ID]++
	}
	w.mu.Unlock()
	return msgs, err
}

// Ack counts acks that succeeded.
func (w *Wrapped) Ack(ctx context.Context, m *broker.Message) error {
	err := w.Source.Ack(ctx, m)
	if err == nil {
		w.mu.Lock()
		w.acks++
		w.mu.Unlock()
	}
	return err
}

// Deliveries reports how often the message with id was received.
func (w *Wrapped) Deliveries(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deliveries[id]
}

// Acks reports how many acks succeeded.
func (w *Wrapped) Acks() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acks
}
