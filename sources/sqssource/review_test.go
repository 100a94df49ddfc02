package sqssource_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/outbox/outboxtest"
)

// An outgoing message whose body SQS cannot carry (bytes that are not
// UTF-8, as a binary Kafka value is) is refused for good, alone: the
// entries beside it in the batch are sent once, and nothing reaches the
// queue altered.
func TestReviewBinaryBodyRefusedAlone(t *testing.T) {
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	entries := outboxtest.Entries(url, "binary", 3, 3)
	entries[1].Body = []byte{0xff, 'a'}
	errs := newSender(t).Send(context.Background(), entries)
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], outbox.ErrRefused) {
		t.Fatalf("send errors %v; want the binary body refused for good, the others sent", errs)
	}
	msgs, err := readAll(t.Context(), c, url, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 {
		t.Fatalf("%d messages in the queue, want the 2 sendable ones", len(msgs))
	}
}
