package sharesource_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource/sharesource"
)

// Records polled and left waiting for a Receive past their lock keep it:
// the source renews them, so they come as first deliveries, not as
// redeliveries counted against the group's delivery-count limit.
func TestWaitingRecordsKeepTheirLock(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	w := producer(t, addr, topic)
	ctx := testenv.Context(t, time.Minute)
	for i := range 5 {
		if err := w.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "r-%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	src := newSource(t, addr, group, topic, sharesource.Members(1), sharesource.MaxRecords(5))
	var got int
	first, err := src.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	got += len(first)
	// The others wait, polled, for twice the lock; the first is extended
	// as the consumer would.
	for end := time.Now().Add(2 * testLock); time.Now().Before(end); {
		if err := src.Extend(ctx, first[0], testLock); err != nil {
			t.Fatal(err)
		}
		time.Sleep(testLock / 4)
	}
	for got < 5 {
		msgs, err := src.Receive(ctx, 5)
		if err != nil {
			t.Fatalf("receive after %d: %v", got, err)
		}
		for _, m := range msgs {
			if m.Deliveries != 1 {
				t.Fatalf("%s came as delivery %d after waiting: its lock ran out", m.Body, m.Deliveries)
			}
			if err := src.Ack(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
		got += len(msgs)
	}
	if first[0].Deliveries != 1 {
		t.Fatalf("first record delivery %d", first[0].Deliveries)
	}
}
