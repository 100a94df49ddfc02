package kafkasource_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/kafkasource"
)

// A handler that passes its input's idempotency-key on as a header (as
// one copying the input's attributes does) gives its entries one such
// header value. When one of them is too large, the Sender must refuse
// that one alone: it finds the message kafka-go names by its
// idempotency-key header, and the first header of that name is the
// handler's, shared by the entry beside it, which went DEAD in its
// place, deliverable as it was.
func TestReviewTooLargeRefusesTheRightEntryWithAHeaderNamedAsTheKey(t *testing.T) {
	addr := cluster(t)
	topic := topicName(t, "out")
	createTopic(t, addr, topic, 1)
	s, err := kafkasource.NewSender(senderWriter(t, addr))
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{broker.IdempotencyKeyAttribute: "the-input's-key"}
	entries := []outbox.Entry{
		{Message: outbox.Message{Destination: topic, Body: []byte("fine"), Headers: h}, ID: outbox.ID("in", 0)},
		{Message: outbox.Message{Destination: topic, Body: bytes.Repeat([]byte("z"), 2<<20), Headers: h}, ID: outbox.ID("in", 1)},
	}
	errs := s.Send(testenv.Context(t, 30*time.Second), entries)
	if errs[0] != nil {
		t.Errorf("the ordinary entry: %v, want it taken", errs[0])
	}
	if !errors.Is(errs[1], outbox.ErrRefused) {
		t.Errorf("the entry too large: %v, want refused", errs[1])
	}
}
