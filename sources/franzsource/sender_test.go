package franzsource_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/outbox/outboxtest"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

func TestSenderConformance(t *testing.T) {
	addr := cluster(t)
	topic := topicName(t, "out")
	createTopic(t, addr, topic, 3)
	s, err := franzsource.NewSender(client(t, addr, kgo.UnknownTopicRetries(1)))
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.Run(t, outboxtest.Case{
		Sender:      s,
		Destination: topic,
		Source: func(t *testing.T) broker.Source {
			return newSource(t, addr, topicName(t, "group"), []string{topic})
		},
		Ordered:  true,
		Missing:  topicName(t, "missing"),
		Invalid:  "not a topic!",
		TooLarge: bytes.Repeat([]byte("z"), 2<<20),
	})
}

func TestNewSenderRefusesAClientWithoutIdempotence(t *testing.T) {
	addr := cluster(t)
	if _, err := franzsource.NewSender(client(t, addr, kgo.DisableIdempotentWrite())); !errors.Is(err, kafkagroup.ErrInvalidConfig) {
		t.Fatalf("NewSender: %v, want ErrInvalidConfig", err)
	}
	if _, err := franzsource.NewSender(nil); !errors.Is(err, kafkagroup.ErrInvalidConfig) {
		t.Fatalf("NewSender(nil): %v, want ErrInvalidConfig", err)
	}
}

// One Send of entries with and without an OrderingKey, with headers of
// their own, beside one it refuses, writes each record with its own key,
// value and headers, and the entry's ID as its idempotency-key.
func TestSenderRecordsOfOneSend(t *testing.T) {
	ctx, addr, topic, s := oneTopicSender(t)
	var es []outbox.Entry
	for i := range 6 {
		m := outbox.Message{Destination: topic, Body: fmt.Appendf(nil, "body-%d", i),
			Headers: map[string]string{"event-type": fmt.Sprintf("type-%d", i), "n": strconv.Itoa(i)}}
		if i%2 == 0 {
			m.OrderingKey = fmt.Sprintf("order-%d", i)
		}
		if i == 3 {
			m.Destination = "not a topic!"
		}
		if i == 4 {
			m.Headers = nil
		}
		es = append(es, outbox.Entry{Message: m, ID: outbox.ID("in", i)})
	}
	errs := s.Send(ctx, es)
	for i, err := range errs {
		if (i == 3) != (err != nil) {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	recs, err := readTopic(ctx, t, addr, topic)
	if err != nil || len(recs) != 5 {
		t.Fatalf("read %d records, %v; want 5", len(recs), err)
	}
	for _, r := range recs {
		headers := map[string]string{}
		for _, h := range r.Headers {
			if _, twice := headers[h.Key]; twice {
				t.Errorf("record %q: header %s twice", r.Value, h.Key)
			}
			headers[h.Key] = string(h.Value)
		}
		e := es[slices.IndexFunc(es, func(e outbox.Entry) bool { return string(e.Body) == string(r.Value) })]
		want := maps.Clone(e.Headers)
		if want == nil {
			want = map[string]string{}
		}
		want[broker.IdempotencyKeyAttribute] = e.ID
		if string(r.Key) != e.OrderingKey || !maps.Equal(headers, want) {
			t.Errorf("record %q: key %q, headers %v; want key %q, headers %v", r.Value, r.Key, headers, e.OrderingKey, want)
		}
	}
}

// oneTopicSender is a Sender over a client of the test cluster, beside a
// new topic of one partition to send to and read back.
func oneTopicSender(t *testing.T) (ctx context.Context, addr, topic string, s *franzsource.Sender) {
	t.Helper()
	addr = cluster(t)
	topic = topicName(t, "out")
	createTopic(t, addr, topic, 1)
	s, err := franzsource.NewSender(client(t, addr))
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Context(t, 30*time.Second), addr, topic, s
}
