package sqssource_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/outbox/outboxtest"
	"github.com/onceq/onceq/sources/sqssource"
)

func newSender(t *testing.T) *sqssource.Sender {
	t.Helper()
	s, err := sqssource.NewSender(client(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSenderConformance(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second, maxSize: 1024})
	outboxtest.Run(t, outboxtest.Case{
		Sender:      newSender(t),
		Destination: url,
		Source:      func(t *testing.T) broker.Source { return newSource(t, c, url, sqssource.WaitTime(time.Second)) },
		Missing:     strings.TrimSuffix(url, "/") + "-missing",
		Invalid:     "orders",
		TooLarge:    bytes.Repeat([]byte("x"), 2048),
	})
}

func TestSenderConformanceFIFO(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{fifo: true, visibility: 30 * time.Second})
	outboxtest.Run(t, outboxtest.Case{
		Sender:      newSender(t),
		Destination: url,
		Source:      func(t *testing.T) broker.Source { return newSource(t, c, url, sqssource.WaitTime(time.Second)) },
		Ordered:     true,
		DropsCopies: true,
	})
}

// On a FIFO queue the group is the entry's OrderingKey and the
// deduplication ID the SHA-256 of its ID: SQS drops a copy sent again
// within its window.
func TestSenderFIFOGroupAndDeduplicationID(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{fifo: true, visibility: 30 * time.Second})
	s := newSender(t)
	entries := outboxtest.Entries(url, "order-7", 2, 1)
	entries[1].OrderingKey = ""
	for range 2 {
		for i, err := range s.Send(context.Background(), entries) {
			if err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
	}
	msgs, err := readAll(context.Background(), c, url, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 {
		t.Fatalf("%d messages on the queue, want 2: the copies sent again are dropped", len(msgs))
	}
	for _, m := range msgs {
		id := aws.ToString(m.MessageAttributes[broker.IdempotencyKeyAttribute].StringValue)
		sum := sha256.Sum256([]byte(id))
		if got := m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)]; got != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: deduplication ID %q, want the SHA-256 of its ID", id, got)
		}
		group := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		switch id {
		case entries[0].ID:
			if group != entries[0].OrderingKey {
				t.Errorf("group %q, want the OrderingKey %q", group, entries[0].OrderingKey)
			}
		case entries[1].ID:
			if group == "" {
				t.Error("an entry with no OrderingKey has no group")
			}
		default:
			t.Errorf("unexpected message %q", id)
		}
	}
}

// Eleven entries of 30 KiB to a queue of 256 KiB messages go in calls
// every region takes (ten entries, 256 KiB).
func TestSenderSplitsBatches(t *testing.T) {
	t.Parallel()
	s, p, c := proxied(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second, maxSize: 256 << 10})
	entries := outboxtest.Entries(url, "split", 11, 11)
	for i := range entries {
		entries[i].Body = bytes.Repeat([]byte("y"), 30<<10)
	}
	for i, err := range s.Send(context.Background(), entries) {
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if vis, _ := depth(t, c, url); vis != 11 {
		t.Fatalf("%d messages visible, want 11", vis)
	}
	if n := p.Requests("SendMessageBatch"); n != 2 {
		t.Errorf("%d SendMessageBatch calls, want 2 of at most 256 KiB", n)
	}
}

func TestNewSenderNeedsAClient(t *testing.T) {
	if _, err := sqssource.NewSender(nil); !errors.Is(err, sqssource.ErrInvalidConfig) {
		t.Fatalf("NewSender(nil): %v, want ErrInvalidConfig", err)
	}
}
