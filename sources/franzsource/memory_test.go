package franzsource_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// TestMemoryBoundedByBytes: 1 MB records on two partitions under a slow
// handler; every partition pauses once the records held reach
// MaxInFlightBytes. Records are sent uncompressed: a compressed batch is
// decompressed whole, so one fetch can exceed its bytes.
func TestMemoryBoundedByBytes(t *testing.T) {
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 2)
	p := client(t, addr, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(1_048_588), kgo.ProducerBatchCompression(kgo.NoCompression()))
	grouptest.MemoryBoundedByBytes(t,
		func(key, value []byte) { produce(t, p, &kgo.Record{Key: key, Value: value}) },
		p.Close,
		func(opt kafkagroup.Option) consumer.Source {
			return newSource(t, addr, group, []string{topic}, opt)
		})
}
