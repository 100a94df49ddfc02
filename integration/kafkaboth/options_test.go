package kafkaboth_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// Both sources take kafkagroup's options and their own client's; an
// option of the other client's source is refused with the one
// ErrInvalidConfig, before any broker is dialled, not silently dropped.
func TestOtherSourcesOptionRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	brokers, topics := []string{"127.0.0.1:1"}, []string{"t"}
	f, err := franzsource.New(ctx, brokers, "g", topics, kafkagroup.CommitInterval(1), kafkasource.WithDialer(&kafkago.Dialer{}))
	if !errors.Is(err, kafkagroup.ErrInvalidConfig) || !strings.Contains(err.Error(), "another Kafka source") {
		if f != nil {
			_ = f.Close(ctx)
		}
		t.Errorf("franzsource.New with kafkasource.WithDialer: %v, want ErrInvalidConfig", err)
	}
	k, err := kafkasource.New(ctx, brokers, "g", topics, kafkagroup.CommitInterval(1), franzsource.ClientID("x"))
	if !errors.Is(err, kafkagroup.ErrInvalidConfig) || !strings.Contains(err.Error(), "another Kafka source") {
		if k != nil {
			_ = k.Close(ctx)
		}
		t.Errorf("kafkasource.New with franzsource.ClientID: %v, want ErrInvalidConfig", err)
	}
}
