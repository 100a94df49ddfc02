package kafkasource_test

import (
	"testing"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// TestMemoryBoundedByBytes: 1 MB records on two partitions under a slow
// handler; the records held stay within MaxInFlightBytes.
func TestMemoryBoundedByBytes(t *testing.T) {
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 2)
	w := writer(t, addr, topic)
	w.BatchSize = 1
	grouptest.MemoryBoundedByBytes(t,
		func(key, value []byte) { produce(t, w, kgo.Message{Key: key, Value: value}) },
		func() { _ = w.Close() },
		func(opt kafkagroup.Option) consumer.Source {
			return newSource(t, addr, group, []string{topic}, opt)
		})
}
