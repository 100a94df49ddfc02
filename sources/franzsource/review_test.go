package franzsource_test

import (
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/franzsource"
)

// An entry whose Headers hold one named idempotency-key (a handler that
// passes its input's key on) is sent with the entry's ID as its only
// header of that name: a consumer that reads the first of a name must
// not take the input's key for the message's own.
func TestReviewRecordCarriesOneIdempotencyKeyHeader(t *testing.T) {
	addr := cluster(t)
	topic := topicName(t, "out")
	createTopic(t, addr, topic, 1)
	s, err := franzsource.NewSender(client(t, addr))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 30*time.Second)
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
