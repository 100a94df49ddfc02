package franzsource_test

import (
	"testing"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/outbox"
)

// An entry whose Headers hold one named idempotency-key (a handler that
// passes its input's key on) is sent with the entry's ID as its only
// header of that name: a consumer that reads the first of a name must
// not take the input's key for the message's own.
func TestReviewRecordCarriesOneIdempotencyKeyHeader(t *testing.T) {
	ctx, addr, topic, s := oneTopicSender(t)
	e := outbox.Entry{Message: outbox.Message{Destination: topic, Body: []byte("b"),
		Headers: map[string]string{broker.IdempotencyKeyAttribute: "the-input's-key", "other": "v"}}, ID: outbox.ID("in", 0)}
	if errs := s.Send(ctx, []outbox.Entry{e}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	recs, err := readTopic(ctx, t, addr, topic)
	if err != nil || len(recs) != 1 {
		t.Fatalf("read %d records, %v", len(recs), err)
	}
	var keys []string
	for _, h := range recs[0].Headers {
		if h.Key == broker.IdempotencyKeyAttribute {
			keys = append(keys, string(h.Value))
		}
	}
	if len(keys) != 1 || keys[0] != e.ID {
		t.Errorf("idempotency-key headers %q, want one, the entry's ID %q", keys, e.ID)
	}
}
