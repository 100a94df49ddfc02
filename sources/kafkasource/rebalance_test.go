package kafkasource_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// TestRebalanceExactlyOnce: 20,000 messages, a fifth of them duplicates
// (same idempotency key and payload, often in another partition), over six
// partitions, consumed by a group whose members join and leave mid-run, at
// most three at a time, sharing one dedup store. Every effect happens
// exactly once and the committed offsets end at the log end.
//
// With a graceful drain revoked members finish their in-flight messages
// before the group moves on; with a 1ms drain they abandon them, so their
// acks come late and are dropped, and the new owners see the messages again.
func TestRebalanceExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("rebalance run takes several seconds")
	}
	t.Parallel()
	for _, drain := range []time.Duration{time.Second, time.Millisecond} {
		t.Run("drain="+drain.String(), func(t *testing.T) {
			t.Parallel()
			rebalanceRun(t, drain)
		})
	}
}

func rebalanceRun(t *testing.T, drain time.Duration) {
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	const partitions, total, unique = 6, 20000, 16000
	createTopic(t, addr, topic, partitions)

	rng := rand.New(rand.NewPCG(4, 20000))
	msg := func(id int) kgo.Message {
		key := fmt.Sprintf("id-%05d", id)
		return kgo.Message{
			// The record key is drawn anew for a duplicate, so it often
			// lands in another partition, owned by another member.
			Key:     fmt.Appendf(nil, "cust-%03d", rng.IntN(300)),
			Value:   fmt.Appendf(nil, "order %s", key),
			Headers: []kgo.Header{{Key: consumer.IdempotencyKeyAttribute, Value: []byte(key)}},
		}
	}
	out := make([]kgo.Message, 0, total)
	for id := range unique {
		out = append(out, msg(id))
	}
	for range total - unique {
		out = append(out, msg(rng.IntN(unique)))
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	produce(t, writer(t, addr, topic), out...)

	store := memstoretest.New(t)
	eff := grouptest.NewEffects()
	var handled atomic.Int64
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		handled.Add(1)
		time.Sleep(time.Millisecond) // slow enough for the churn to land mid-run
		return consumer.Result{Writes: []dedup.Write{eff.Write(m.IdempotencyKey)}}, nil
	})
	var lateAcks, rebalances atomic.Int64
	hooks := kafkagroup.WithHooks(
		onLateAck(func(context.Context, string, int32, int64, int32) { lateAcks.Add(1) }),
		onRebalance(func(_ context.Context, e kafkagroup.RebalanceEvent) {
			if e.Revoked {
				rebalances.Add(1)
			}
		}),
	)
	join := func() *grouptest.Member {
		src := newSource(t, addr, group, []string{topic}, hooks, kafkagroup.RevokeTimeout(drain))
		return grouptest.Start(t, src, store, h, consumer.Concurrency(4), consumer.MaxInFlight(64))
	}
	progress := func(n int64) func() bool { return func() bool { return eff.Total() >= n } }

	a, b := join(), join()
	testenv.Eventually(t, 60*time.Second, "2,000 effects", progress(2000))
	c := join()
	testenv.Eventually(t, 60*time.Second, "6,000 effects", progress(6000))
	a.Stop(t)
	testenv.Eventually(t, 60*time.Second, "9,000 effects", progress(9000))
	d := join()
	testenv.Eventually(t, 60*time.Second, "12,000 effects", progress(12000))
	b.Stop(t)
	e := join()
	testenv.Eventually(t, 60*time.Second, "every unique message", progress(unique))

	// The members still running commit everything, then leave.
	testenv.Eventually(t, 30*time.Second, "committed offsets at the log end", func() bool {
		got, end, err := committed(testenv.Context(t, 5*time.Second), t, addr, group, topic, partitions)
		return err == nil && slices.Equal(got, end)
	})
	for _, m := range []*grouptest.Member{c, d, e} {
		m.Stop(t)
	}
	got, end, err := committed(testenv.Context(t, 5*time.Second), t, addr, group, topic, partitions)
	if err != nil || !slices.Equal(got, end) {
		t.Fatalf("after the members left: committed %v, log end %v (err %v)", got, end, err)
	}
	var sum int64
	for _, n := range end {
		sum += n
	}
	if sum != total {
		t.Fatalf("log holds %d records, want %d", sum, total)
	}

	eff.ExactlyOnce(t, unique)
	t.Logf("handler calls %d for %d records (%d unique); revokes %d; late acks dropped %d",
		handled.Load(), total, unique, rebalances.Load(), lateAcks.Load())
}
