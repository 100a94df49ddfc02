package kafkasource_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/outbox/outboxtest"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// senderWriter is a Writer fit for a Sender: no Topic, acknowledged,
// partitioned by key.
func senderWriter(t testing.TB, addr string) *kgo.Writer {
	w := &kgo.Writer{Addr: kgo.TCP(addr), Transport: transport(t), Balancer: &kgo.Hash{}, RequiredAcks: kgo.RequireAll,
		BatchTimeout: time.Millisecond, MaxAttempts: 2}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func TestSenderConformance(t *testing.T) {
	addr := cluster(t)
	topic := topicName(t, "out")
	createTopic(t, addr, topic, 3)
	s, err := kafkasource.NewSender(senderWriter(t, addr))
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

func TestNewSenderRefusesAWriterThatLosesOrderOrAcks(t *testing.T) {
	ok := func() *kgo.Writer {
		return &kgo.Writer{Addr: kgo.TCP("127.0.0.1:1"), Balancer: &kgo.Hash{}, RequiredAcks: kgo.RequireAll}
	}
	for name, w := range map[string]*kgo.Writer{
		"nil":         nil,
		"topic":       func() *kgo.Writer { w := ok(); w.Topic = "t"; return w }(),
		"async":       func() *kgo.Writer { w := ok(); w.Async = true; return w }(),
		"no acks":     func() *kgo.Writer { w := ok(); w.RequiredAcks = kgo.RequireNone; return w }(),
		"round robin": func() *kgo.Writer { w := ok(); w.Balancer = nil; return w }(),
		"least bytes": func() *kgo.Writer { w := ok(); w.Balancer = &kgo.LeastBytes{}; return w }(),
	} {
		if _, err := kafkasource.NewSender(w); !errors.Is(err, kafkagroup.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := kafkasource.NewSender(ok()); err != nil {
		t.Errorf("a fit Writer: %v", err)
	}
}
