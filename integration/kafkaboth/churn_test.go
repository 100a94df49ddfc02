package kafkaboth_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// TestChurnExactlyOnce runs three members over six partitions, then one
// leaves gracefully and one is killed (it closes without leaving: its
// LeaveGroup is swallowed, so the group waits out its session). Every
// effect happens exactly once, the committed offsets reach the log end,
// and for the partitions the survivor owned throughout, the longest gap in
// their processing is logged, for franzsource and for kafkasource in the
// same run: cooperative members keep processing through the rebalances,
// eager ones stop.
func TestChurnExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("churn run takes several seconds")
	}
	t.Parallel()
	gaps := map[string]time.Duration{}
	var mu sync.Mutex
	t.Run("sources", func(t *testing.T) {
		for _, f := range []struct {
			name string
			open func(t *testing.T, addr, group, topic string, hook any) consumer.Source
		}{
			{"franz", func(t *testing.T, addr, group, topic string, hook any) consumer.Source {
				return newFranzSource(t, addr, group, topic, kafkagroup.WithHooks(hook), kafkagroup.Ordering(consumer.OrderByPartition))
			}},
			{"kafka", func(t *testing.T, addr, group, topic string, hook any) consumer.Source {
				return newKafkaSource(t, addr, group, topic, kafkagroup.WithHooks(hook), kafkagroup.Ordering(consumer.OrderByPartition))
			}},
		} {
			t.Run(f.name, func(t *testing.T) {
				t.Parallel()
				g := churn(t, f.open)
				mu.Lock()
				gaps[f.name] = g
				mu.Unlock()
			})
		}
	})
	if !t.Failed() {
		t.Logf("longest processing gap on partitions that did not move: franz (cooperative) %v, kafka (eager) %v",
			gaps["franz"].Round(time.Millisecond), gaps["kafka"].Round(time.Millisecond))
	}
}

// owner follows the partitions one member owns, through its rebalance
// events (the same hook type serves both sources).
type owner struct {
	mu    sync.Mutex
	owned map[int32]bool
}

func (o *owner) OnKafkaRebalance(_ context.Context, e kafkagroup.RebalanceEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, ps := range e.Partitions {
		for _, p := range ps {
			o.owned[p] = !e.Revoked
		}
	}
}

func (o *owner) set() map[int32]bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[int32]bool{}
	for p, ok := range o.owned {
		if ok {
			out[p] = true
		}
	}
	return out
}

// churn runs the scenario over sources made by open and returns the
// longest gap between two messages the survivor processed of a partition
// it owned before the first member left and still owns at the end.
func churn(t *testing.T, open func(t *testing.T, addr, group, topic string, hook any) consumer.Source) time.Duration {
	c, err := kfake.NewCluster(kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	topic, group := topicName(t, "in"), topicName(t, "group")
	const partitions, perPartition, dups = 6, 2500, 1500
	createTopic(t, addr, topic, partitions)

	rng := rand.New(rand.NewPCG(6, 3))
	var recs []*kgo.Record
	rec := func(id, partition int) *kgo.Record {
		key := fmt.Sprintf("id-%05d", id)
		return &kgo.Record{Topic: topic, Partition: int32(partition), Value: fmt.Appendf(nil, "order %s", key),
			Headers: []kgo.RecordHeader{{Key: consumer.IdempotencyKeyAttribute, Value: []byte(key)}}}
	}
	unique := partitions * perPartition
	for id := range unique {
		recs = append(recs, rec(id, id%partitions))
	}
	for range dups {
		recs = append(recs, rec(rng.IntN(unique), rng.IntN(partitions))) // often in another partition
	}
	rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	produce(t, client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner())), recs...)

	store := memstoretest.New(t)
	eff := grouptest.NewEffects()
	var tmu sync.Mutex
	times := map[int32][]time.Time{} // the survivor's processing, by partition
	handler := func(survivor bool) consumer.Handler {
		return consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
			time.Sleep(2 * time.Millisecond) // the handler's work: slow enough for the churn to land mid-run
			if survivor {
				tmu.Lock()
				times[m.Origin.Partition] = append(times[m.Origin.Partition], time.Now())
				tmu.Unlock()
			}
			return consumer.Result{Writes: []dedup.Write{eff.Write(m.IdempotencyKey)}}, nil
		})
	}
	owners := make([]*owner, 3)
	members := make([]*grouptest.Member, 3)
	for i := range members {
		owners[i] = &owner{owned: map[int32]bool{}}
		members[i] = grouptest.Start(t, open(t, addr, group, topic, owners[i]), store, handler(i == 2),
			consumer.Concurrency(partitions), consumer.MaxInFlight(64))
	}
	testenv.Eventually(t, 30*time.Second, "each member owning two partitions", func() bool {
		for _, o := range owners {
			if len(o.set()) != 2 {
				return false
			}
		}
		return true
	})
	before := owners[2].set()
	windowStart := time.Now()

	members[0].Stop(t) // graceful: it leaves the group
	testenv.Eventually(t, 30*time.Second, "the two others owning every partition after the leave", func() bool {
		return len(owners[1].set())+len(owners[2].set()) == partitions
	})
	// Killed: its LeaveGroup is answered but never reaches the group, which
	// keeps its partitions until its session times out.
	c.ControlKey(kmsg.LeaveGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		return kmsg.NewPtrLeaveGroupResponse(), nil, true
	})
	members[1].Stop(t)

	testenv.Eventually(t, 90*time.Second, "every unique message", func() bool { return eff.Total() >= int64(unique) })
	testenv.Eventually(t, 30*time.Second, "committed offsets at the log end", func() bool {
		got, end, err := committed(testenv.Context(t, 5*time.Second), addr, group, topic)
		return err == nil && slices.Equal(got, end)
	})
	after := owners[2].set()
	members[2].Stop(t)
	eff.ExactlyOnce(t, unique)

	var gap time.Duration
	tmu.Lock()
	defer tmu.Unlock()
	var kept []int32
	for p := range before {
		if !after[p] {
			continue
		}
		kept = append(kept, p)
		ts := times[p]
		for i := 1; i < len(ts); i++ {
			if ts[i].After(windowStart) {
				gap = max(gap, ts[i].Sub(ts[i-1]))
			}
		}
	}
	slices.Sort(kept)
	t.Logf("survivor kept partitions %v of %v; longest gap in their processing %v", kept, before, gap.Round(time.Millisecond))
	return gap
}
