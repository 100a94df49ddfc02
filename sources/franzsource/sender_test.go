package franzsource_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
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
