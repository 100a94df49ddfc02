package dynamostore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/outbox"
)

// An outgoing message within the 400 KB that the store documents and
// checks either commits or is refused with an *OutboxTooLargeError
// naming the message, never an error about the record.
func TestReviewOutboxEntryWithinTheCheckedLimit(t *testing.T) {
	s, _, _ := outboxStore(t)
	now := time.Now()
	l := claimAt(t, s, "test#large", now)
	err := s.Complete(t.Context(), dedup.CompleteRequest{Lease: l, Response: []byte("ok"), Now: now, ExpiresAt: now.Add(time.Hour),
		Outbox: []outbox.Message{{Destination: "q", OrderingKey: "k", Body: make([]byte, 300<<10)}}})
	var tl *dynamostore.OutboxTooLargeError
	if err != nil && !errors.As(err, &tl) {
		t.Fatalf("Complete with a message of 300 KB: %v; want success or an *OutboxTooLargeError", err)
	}
}
