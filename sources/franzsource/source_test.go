package franzsource_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic := topicName(t, "in")
	createTopic(t, addr, topic, 1)
	ctx := testenv.Context(t, 10*time.Second)
	refused := map[string]struct {
		topics []string
		opt    franzsource.Option
		want   error
	}{
		"a topic that does not exist":        {[]string{"nope"}, franzsource.ClientID("x"), kafkagroup.ErrUnknownTopic},
		"a dead-letter topic that does not":  {[]string{topic}, kafkagroup.DeadLetterTopic("nope"), kafkagroup.ErrUnknownTopic},
		"a revoke longer than the rebalance": {[]string{topic}, kafkagroup.RevokeTimeout(2 * time.Minute), kafkagroup.ErrInvalidConfig},
		"no topic":                           {nil, franzsource.ClientID("x"), kafkagroup.ErrInvalidConfig},
		"an ordering of no kind":             {[]string{topic}, kafkagroup.Ordering(7), kafkagroup.ErrInvalidConfig},
		"a protocol of no kind":              {[]string{topic}, franzsource.GroupProtocol(9), kafkagroup.ErrInvalidConfig},
		"a reset of no kind":                 {[]string{topic}, kafkagroup.OffsetReset(9), kafkagroup.ErrInvalidConfig},
		"a hook with a misspelt method":      {[]string{topic}, kafkagroup.WithHooks(struct{ OnComit func() }{}), kafkagroup.ErrInvalidConfig},
	}
	for what, c := range refused {
		if s, err := franzsource.New(ctx, []string{addr}, "g", c.topics, c.opt); !errors.Is(err, c.want) {
			if s != nil {
				_ = s.Close(ctx)
			}
			t.Errorf("New with %s: %v, want %v", what, err, c.want)
		}
	}
}

// TestToMessageAllocates: a record without headers costs two allocations,
// the Message, and its ID and key together.
func TestToMessageAllocates(t *testing.T) {
	rec := &kgo.Record{Topic: "orders", Partition: 4, Offset: 77, Key: []byte("cust-1"), Value: []byte("v")}
	if n := testing.AllocsPerRun(100, func() { franzsource.ToMessage(rec, 1) }); n != 2 {
		t.Fatalf("ToMessage allocates %v times, want 2", n)
	}
}

// The consumer protocol really is KIP-848's on kfake: the broker knows
// the group as a consumer group and its member by ConsumerGroupDescribe,
// which answers nothing for a classic group.
func TestConsumerProtocolIsKIP848(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic := topicName(t, "in")
	createTopic(t, addr, topic, 2)
	for _, p := range []franzsource.Protocol{franzsource.ConsumerProtocol, franzsource.Cooperative} {
		group := topicName(t, fmt.Sprint("group", p))
		assigned := make(chan struct{}, 1)
		newSource(t, addr, group, []string{topic}, franzsource.GroupProtocol(p), kafkagroup.WithHooks(onRebalance(func(_ context.Context, e kafkagroup.RebalanceEvent) {
			if !e.Revoked {
				select {
				case assigned <- struct{}{}:
				default:
				}
			}
		})))
		select {
		case <-assigned:
		case <-time.After(20 * time.Second):
			t.Fatalf("protocol %d: no assignment", p)
		}
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{group}
		resp, err := req.RequestWith(testenv.Context(t, 10*time.Second), client(t, addr))
		if err != nil {
			t.Fatal(err)
		}
		g := resp.Groups[0]
		isConsumerGroup := g.ErrorCode == 0 && len(g.Members) == 1
		if isConsumerGroup != (p == franzsource.ConsumerProtocol) {
			t.Fatalf("protocol %d: ConsumerGroupDescribe error %d, %d members", p, g.ErrorCode, len(g.Members))
		}
	}
}

// When a second member joins, a cooperative rebalance takes from the first
// only the partitions that move: the messages it holds of the partitions
// it keeps stay its own, so their acks count and are committed, while the
// acks of moved partitions come late and are dropped. Eager, the control,
// revokes everything: every ack is late.
func TestRebalanceRevokesOnlyWhatMoves(t *testing.T) {
	t.Parallel()
	for _, p := range []struct {
		name  string
		proto franzsource.Protocol
	}{{"cooperative", franzsource.Cooperative}, {"consumer-protocol", franzsource.ConsumerProtocol}, {"eager", franzsource.Eager}} {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			revokesOnlyWhatMoves(t, p.proto)
		})
	}
}

func revokesOnlyWhatMoves(t *testing.T, proto franzsource.Protocol) {
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	const partitions, total = 6, 120
	createTopic(t, addr, topic, partitions)
	var recs []*kgo.Record
	for i := range total {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: fmt.Appendf(nil, "m%03d", i)})
	}
	produce(t, client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner())), recs...)

	var mu sync.Mutex
	revoked := map[int32]bool{}
	var late atomic.Int64
	lateKept := map[int32]int{}
	a := newSource(t, addr, group, []string{topic}, franzsource.GroupProtocol(proto), kafkagroup.RevokeTimeout(300*time.Millisecond),
		kafkagroup.Ordering(consumer.Unordered),
		kafkagroup.WithHooks(onRebalance(func(_ context.Context, e kafkagroup.RebalanceEvent) {
			if e.Revoked {
				mu.Lock()
				for _, id := range e.Partitions[topic] {
					revoked[id] = true
				}
				mu.Unlock()
			}
		}), onLateAck(func(_ context.Context, _ string, p int32, _ int64, _ int32) {
			late.Add(1)
			mu.Lock()
			lateKept[p]++
			mu.Unlock()
		})))
	held := grouptest.ReceiveN(t, a, total)

	bGot := make(chan struct{})
	var once sync.Once
	newSource(t, addr, group, []string{topic}, franzsource.GroupProtocol(proto), kafkagroup.WithHooks(onRebalance(func(_ context.Context, e kafkagroup.RebalanceEvent) {
		if !e.Revoked && len(e.Partitions[topic]) > 0 {
			once.Do(func() { close(bGot) })
		}
	})))
	select {
	case <-bGot:
	case <-time.After(30 * time.Second):
		t.Fatal("the second member got no partitions")
	}
	for _, m := range held {
		if err := a.Ack(context.Background(), m); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	mu.Lock()
	moved := len(revoked)
	var kept []int32
	for id := range int32(partitions) {
		if !revoked[id] {
			kept = append(kept, id)
		}
	}
	mu.Unlock()
	if proto == franzsource.Eager {
		if late.Load() != total {
			t.Fatalf("eager: %d of %d acks late, want all (revoked %d partitions)", late.Load(), total, moved)
		}
		return
	}
	if len(kept) == 0 || moved == 0 {
		t.Fatalf("revoked %d partitions, kept %v: want some of each", moved, kept)
	}
	if want := int64(moved * total / partitions); late.Load() != want {
		t.Fatalf("%d acks late, want %d (the moved partitions' only)", late.Load(), want)
	}
	// The kept partitions commit to their log end.
	testenv.Eventually(t, 20*time.Second, "kept partitions committed", func() bool {
		got, end, err := committed(testenv.Context(t, 5*time.Second), addr, group, topic)
		if err != nil {
			return false
		}
		for _, id := range kept {
			if got[id] != end[id] {
				return false
			}
		}
		return true
	})
}

// A stop whose final commit the group refuses because it has moved on
// (the member dropped, its generation over) is a clean stop: Close
// returns nil, as the next owner reads the uncommitted messages again.
func TestCloseAfterGroupMovedOn(t *testing.T) {
	t.Parallel()
	for _, refusal := range []*kerr.Error{kerr.UnknownMemberID, kerr.RebalanceInProgress, kerr.IllegalGeneration} {
		t.Run(refusal.Message, func(t *testing.T) {
			t.Parallel()
			c, err := kfake.NewCluster(kfake.Ports(0), kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			addr := c.ListenAddrs()[0]
			topic := topicName(t, "in")
			createTopic(t, addr, topic, 1)
			produce(t, producer(t, addr, topic), &kgo.Record{Value: []byte("m1")})
			s, err := franzsource.New(testenv.Context(t, 10*time.Second), []string{addr}, topicName(t, "group"), []string{topic},
				append(fastGroup(), kafkagroup.CommitInterval(time.Hour), kafkagroup.RevokeTimeout(2*time.Second), kafkagroup.WithLogger(testenv.Logger(t)))...)
			if err != nil {
				t.Fatal(err)
			}
			// From now on the group refuses every commit of this member.
			refused := make(chan struct{}, 1)
			c.ControlKey(kmsg.OffsetCommit.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				req := r.(*kmsg.OffsetCommitRequest)
				resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
				for _, rt := range req.Topics {
					st := kmsg.NewOffsetCommitResponseTopic()
					st.Topic, st.TopicID = rt.Topic, rt.TopicID
					for _, rp := range rt.Partitions {
						sp := kmsg.NewOffsetCommitResponseTopicPartition()
						sp.Partition, sp.ErrorCode = rp.Partition, refusal.Code
						st.Partitions = append(st.Partitions, sp)
					}
					resp.Topics = append(resp.Topics, st)
				}
				select {
				case refused <- struct{}{}:
				default:
				}
				return resp, nil, true
			})
			msgs := grouptest.ReceiveN(t, s, 1)
			if err := s.Ack(context.Background(), msgs[0]); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(testenv.Context(t, 20*time.Second)); err != nil {
				t.Fatalf("Close after the group refused the final commit with %s: %v, want nil", refusal.Message, err)
			}
			select {
			case <-refused:
			default:
				t.Fatal("the final commit never reached the group")
			}
		})
	}
}
