package kafkacontrol_test

import (
	"context"
	"errors"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// Run checks the store before the source joins the group: a member whose
// store is broken never takes partitions away from the healthy ones.
func TestRunChecksStoreBeforeJoining(t *testing.T) {
	t.Parallel()
	c := controlled(t)
	addr := c.ListenAddrs()[0]
	topic := topicName(t, "in")
	createTopic(t, addr, topic, 1)
	joined := make(chan struct{})
	c.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		close(joined) // once: kfake drops a control function after it ran
		return nil, nil, false
	})
	s, err := kafkasource.New(testenv.Context(t, 10*time.Second), []string{addr}, topicName(t, "group"), []string{topic},
		kafkagroup.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	grouptest.StoreCheckedFirst(t, s, joined)
}

// A stop whose final commit the group refuses because it has moved on
// (the member dropped, its generation over) is a clean stop: Close
// returns nil, as the next owner reads the uncommitted messages again.
func TestCloseAfterGroupMovedOn(t *testing.T) {
	t.Parallel()
	for _, refusal := range []*kerr.Error{kerr.UnknownMemberID, kerr.RebalanceInProgress, kerr.IllegalGeneration} {
		t.Run(refusal.Message, func(t *testing.T) {
			t.Parallel()
			c, err := kfake.NewCluster(kfake.Ports(0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			addr := c.ListenAddrs()[0]
			topic := topicName(t, "in")
			createTopic(t, addr, topic, 1)
			produce(t, writer(t, addr, topic), kgo.Message{Value: []byte("m1")})
			s, err := kafkasource.New(testenv.Context(t, 10*time.Second), []string{addr}, topicName(t, "group"), []string{topic},
				append(fastGroup(), kafkagroup.CommitInterval(time.Hour), kafkagroup.RevokeTimeout(2*time.Second),
					kafkagroup.FetchMaxWait(200*time.Millisecond), kafkagroup.WithLogger(testenv.Logger(t)))...)
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

// New refuses a topic the broker does not have: kfake, unlike the shared
// broker, creates no topic on first use.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	addr := controlled(t).ListenAddrs()[0]
	topic := topicName(t, "in")
	createTopic(t, addr, topic, 1)
	ctx := testenv.Context(t, 10*time.Second)
	cases := []struct {
		name   string
		topics []string
		opts   []kafkasource.Option
		want   error
	}{
		{"unknown topic", []string{"nope"}, nil, kafkagroup.ErrUnknownTopic},
		{"unknown dead-letter topic", []string{topic}, []kafkasource.Option{kafkagroup.DeadLetterTopic("nope")}, kafkagroup.ErrUnknownTopic},
		{"revoke timeout past rebalance", []string{topic}, []kafkasource.Option{kafkagroup.RevokeTimeout(time.Minute)}, kafkagroup.ErrInvalidConfig},
		{"no topics", nil, nil, kafkagroup.ErrInvalidConfig},
		{"bad ordering", []string{topic}, []kafkasource.Option{kafkagroup.Ordering(7)}, kafkagroup.ErrInvalidConfig},
		{"nil dialer", []string{topic}, []kafkasource.Option{kafkasource.WithDialer(nil)}, kafkagroup.ErrInvalidConfig},
		{"bad reset", []string{topic}, []kafkasource.Option{kafkagroup.OffsetReset(9)}, kafkagroup.ErrInvalidConfig},
	}
	for _, c := range cases {
		s, err := kafkasource.New(ctx, []string{addr}, "g", c.topics, c.opts...)
		if !errors.Is(err, c.want) {
			if s != nil {
				_ = s.Close(ctx)
			}
			t.Errorf("%s: New: %v, want %v", c.name, err, c.want)
		}
	}
}
