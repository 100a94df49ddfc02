package franzsource

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/internal/kafkacore"
)

// Sender is an outbox.Sender to Kafka over a franz-go client: each entry's
// Destination is a topic, its OrderingKey the record key (so the entries
// of one key go to one partition, in order), its Body the value.
//
// Each record carries the entry's ID as its idempotency-key header, which
// an onceq Kafka consumer takes as the record's key, so that a
// re-dispatched copy is a duplicate there; the entry's Headers are headers
// beside it (one of that name is replaced by the ID). The client must produce with idempotence (franz-go's
// default), so that its own retries never write a record twice.
//
// An unknown topic, a record too large, an entry with an empty or
// invalid topic name (no topic can take it) are refused for good
// (outbox.RefusedError); anything else is a failure of the moment, sent
// again by the relay.
type Sender struct {
	client *kgo.Client
}

// NewSender returns a Sender over client, which the caller closes after
// the relay stops. A client built with kgo.DisableIdempotentWrite is
// refused: its retries could write a record twice.
func NewSender(client *kgo.Client) (*Sender, error) {
	if client == nil {
		return nil, invalidOption("NewSender needs a franz-go client")
	}
	if off, _ := client.OptValue(kgo.DisableIdempotentWrite).(bool); off {
		return nil, invalidOption("NewSender needs a client that produces with idempotence (no kgo.DisableIdempotentWrite)")
	}
	return &Sender{client: client}, nil
}

// Send implements outbox.Sender: it produces every entry and waits for
// each one's acknowledgement. It produces them with ProduceSync, which
// sends the partitions it produced to at once rather than after the
// client's linger: nothing more is coming for this call.
func (s *Sender) Send(ctx context.Context, entries []outbox.Entry) []error {
	errs := make([]error, len(entries))
	rs := make([]*kgo.Record, 0, len(entries))
	at := make(map[*kgo.Record]int, len(entries))
	for i := range entries {
		if errs[i] = kafkacore.Refusal(&entries[i]); errs[i] != nil {
			continue
		}
		r := record(&entries[i])
		rs = append(rs, r)
		at[r] = i
	}
	if len(rs) == 0 {
		return errs
	}
	for _, res := range s.client.ProduceSync(ctx, rs...) {
		i := at[res.Record]
		errs[i] = produceError(entries[i].Destination, res.Err)
	}
	return errs
}

// KeepsLaneOrder implements outbox.LaneSender: a lane's entries go to
// one partition, in order, and an idempotent client fails every record
// buffered for a partition behind a batch that failed, so that none of a
// lane lands after an earlier one that did not.
func (s *Sender) KeepsLaneOrder() bool { return true }

var _ outbox.LaneSender = (*Sender)(nil)

// record is the Kafka record of e.
func record(e *outbox.Entry) *kgo.Record {
	r := &kgo.Record{Topic: e.Destination, Value: e.Body, Headers: make([]kgo.RecordHeader, 0, len(e.Headers)+1)}
	if e.OrderingKey != "" {
		r.Key = []byte(e.OrderingKey)
	}
	for k, v := range e.Headers {
		// The entry's ID replaces a header of its name: the record
		// carries one.
		if k != broker.IdempotencyKeyAttribute {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: broker.IdempotencyKeyAttribute, Value: []byte(e.ID)})
	return r
}

// produceError is a produce's result as the relay takes it.
func produceError(topic string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.InvalidTopicException):
		return &outbox.RefusedError{Destination: topic, Reason: "no such topic"}
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return &outbox.RefusedError{Destination: topic, Reason: "record too large"}
	}
	return fmt.Errorf("franzsource: producing to %s: %w", topic, err)
}
