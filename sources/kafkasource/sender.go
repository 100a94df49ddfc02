package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"sync"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/internal/kafkacore"
)

// Sender is an outbox.Sender to Kafka over a kafka-go Writer: each
// entry's Destination is a topic, its OrderingKey the message key (so the
// entries of one key go to one partition, in order), its Body the value.
//
// Each message carries the entry's ID as its idempotency-key header,
// which an onceq Kafka consumer takes as the record's key, so that a
// re-dispatched copy is a duplicate there; the entry's Headers are headers
// beside it (one of that name is replaced by the ID). kafka-go has no idempotent producer: a write it retries may
// land twice, and the consumer downstream absorbs that copy the same way.
//
// An unknown topic, a message too large, an entry with an empty or
// invalid topic name (no topic can take it) are refused for good
// (outbox.RefusedError); anything else is a failure of the moment, sent
// again by the relay.
type Sender struct {
	w *kafkago.Writer
}

// NewSender returns a Sender over w, which the caller closes after the
// relay stops. w names no Topic (each message names its own), writes
// synchronously, waits for acknowledgements (RequiredAcks RequireOne or
// RequireAll) and partitions by key (a Balancer such as kafka.Hash or
// kafka.Murmur2Balancer, not the default round robin, which would spread
// a key's entries over partitions and lose their order).
func NewSender(w *kafkago.Writer) (*Sender, error) {
	switch {
	case w == nil:
		return nil, invalidOption("NewSender needs a kafka-go Writer")
	case w.Topic != "":
		return nil, invalidOption("NewSender needs a Writer with no Topic: each entry names its own")
	case w.Async:
		return nil, invalidOption("NewSender needs a Writer that is not Async: the relay marks an entry sent only once it is acknowledged")
	case w.RequiredAcks == kafkago.RequireNone:
		return nil, invalidOption("NewSender needs a Writer with RequiredAcks RequireOne or RequireAll")
	}
	switch w.Balancer.(type) {
	case nil, *kafkago.RoundRobin, *kafkago.LeastBytes:
		return nil, invalidOption("NewSender needs a Writer whose Balancer partitions by key (kafka.Hash, kafka.Murmur2Balancer, kafka.CRC32Balancer)")
	}
	return &Sender{w: w}, nil
}

// Send implements outbox.Sender: one WriteMessages call per topic, the
// topics at once.
func (s *Sender) Send(ctx context.Context, entries []outbox.Entry) []error {
	errs := make([]error, len(entries))
	byTopic := map[string][]int{}
	for i := range entries {
		if errs[i] = kafkacore.Refusal(&entries[i]); errs[i] == nil {
			byTopic[entries[i].Destination] = append(byTopic[entries[i].Destination], i)
		}
	}
	var wg sync.WaitGroup
	for topic, idx := range byTopic {
		wg.Go(func() { s.write(ctx, topic, entries, idx, errs) })
	}
	wg.Wait()
	return errs
}

// write writes the entries idx of one topic.
func (s *Sender) write(ctx context.Context, topic string, entries []outbox.Entry, idx []int, errs []error) {
	msgs := make([]kafkago.Message, len(idx))
	for j, i := range idx {
		msgs[j] = message(entries[i])
	}
	for len(idx) > 0 {
		err := s.w.WriteMessages(ctx, msgs...)
		var tooLarge kafkago.MessageTooLargeError
		if errors.As(err, &tooLarge) {
			// Refused before anything was written: refuse that one and
			// write the rest.
			id := idOf(tooLarge.Message)
			for j := range msgs {
				if idOf(msgs[j]) == id {
					errs[idx[j]] = &outbox.RefusedError{Destination: topic, Reason: "message too large"}
					msgs, idx = append(msgs[:j:j], msgs[j+1:]...), append(idx[:j:j], idx[j+1:]...)
					break
				}
			}
			continue
		}
		var werrs kafkago.WriteErrors
		if errors.As(err, &werrs) && len(werrs) == len(idx) {
			for j, i := range idx {
				errs[i] = writeError(topic, werrs[j])
			}
			return
		}
		for _, i := range idx {
			errs[i] = writeError(topic, err)
		}
		return
	}
}

// message is the Kafka message of e.
func message(e outbox.Entry) kafkago.Message {
	m := kafkago.Message{Topic: e.Destination, Value: e.Body, Headers: make([]kafkago.Header, 0, len(e.Headers)+1)}
	if e.OrderingKey != "" {
		m.Key = []byte(e.OrderingKey)
	}
	for k, v := range e.Headers {
		// The entry's ID replaces a header of its name (a handler that
		// passes its input's key on): the message carries one, which
		// also names it when kafka-go refuses it (idOf).
		if k != broker.IdempotencyKeyAttribute {
			m.Headers = append(m.Headers, kafkago.Header{Key: k, Value: []byte(v)})
		}
	}
	m.Headers = append(m.Headers, kafkago.Header{Key: broker.IdempotencyKeyAttribute, Value: []byte(e.ID)})
	return m
}

// idOf is the entry ID a message carries.
func idOf(m kafkago.Message) string {
	for _, h := range m.Headers {
		if h.Key == broker.IdempotencyKeyAttribute {
			return string(h.Value)
		}
	}
	return ""
}

// writeError is a write's result as the relay takes it.
func writeError(topic string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kafkago.UnknownTopicOrPartition), errors.Is(err, kafkago.InvalidTopic):
		return &outbox.RefusedError{Destination: topic, Reason: "no such topic"}
	case errors.Is(err, kafkago.MessageSizeTooLarge):
		return &outbox.RefusedError{Destination: topic, Reason: "message too large"}
	}
	return fmt.Errorf("kafkasource: writing to %s: %w", topic, err)
}
