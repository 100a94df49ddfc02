package redrive

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/sources/kafkagroup"
)

// A group join slower than the first idle poll (a loaded broker) does not
// make the run call itself caught up with letters in the topic: Next
// waits for the group's partitions and returns the letter.
// oneLetter is an in-process broker whose topic orders-dlt, of
// partitions partitions, holds one letter bound for orders.
func oneLetter(t *testing.T, partitions int32) (*kfake.Cluster, string) {
	t.Helper()
	k, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(partitions, "orders-dlt"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	addr := k.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	letter := &kgo.Record{Topic: "orders-dlt", Key: []byte("o-1"), Value: []byte(`{}`),
		Headers: []kgo.RecordHeader{{Key: kafkagroup.OriginalTopicHeader, Value: []byte("orders")}}}
	if err := cl.ProduceSync(t.Context(), letter).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return k, addr
}

func TestKafkaSlowJoinIsNotCaughtUp(t *testing.T) {
	k, addr := oneLetter(t, 1)
	// The broker holds the group's join past the first poll's idle
	// window (twice Idle), then lets it through.
	const idle = 200 * time.Millisecond
	holdEvery(k, kmsg.JoinGroup, 4*idle)
	firstNextIsTheLetter(t, KafkaConfig{Brokers: []string{addr}, DeadLetterTopic: "orders-dlt", Idle: idle})
}

// A run with no group (the console's) whose first fetch comes after its
// first idle poll has not looked at every letter: it reads on to the end
// offsets the topic had as it began.
func TestKafkaNoGroupSlowFetchIsNotCaughtUp(t *testing.T) {
	k, addr := oneLetter(t, 3)
	// The broker answers every fetch after more than the first poll's
	// idle window (twice Idle).
	const idle = 200 * time.Millisecond
	holdEvery(k, kmsg.Fetch, 4*idle)
	firstNextIsTheLetter(t, KafkaConfig{Brokers: []string{addr}, DeadLetterTopic: "orders-dlt", Idle: idle, NoGroup: true})
}

// holdEvery makes the broker answer every request of key after d, as a
// slow broker does. The wait is the broker's, in real time: it runs a
// network server, which a synctest bubble cannot hold.
func holdEvery(k *kfake.Cluster, key kmsg.Key, d time.Duration) {
	k.ControlKey(key.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.KeepControl()
		k.SleepControl(func() { time.Sleep(d) })
		return nil, nil, false
	})
}

// firstNextIsTheLetter checks that a Lot of cfg returns, at its first
// Next, the one letter of oneLetter's topic, bound for orders.
func firstNextIsTheLetter(t *testing.T, cfg KafkaConfig) {
	t.Helper()
	lot, err := NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	defer func() { _ = lot.Close(ctx) }()
	got, err := lot.Next(ctx)
	if err != nil || len(got) != 1 || got[0].To != "Kafka topic orders" {
		t.Fatalf("Next: %d letters, %v; want the one letter, bound for orders", len(got), err)
	}
}
