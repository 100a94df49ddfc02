package kafkaboth_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// batchSource is either source's batch mode.
type batchSource interface {
	Run(ctx context.Context) error
}

// batchClient opens one source's batch mode.
type batchClient struct {
	name string
	open func(t *testing.T, addr, group, topic string, r *batch.Runner, opts ...kafkagroup.Option) batchSource
}

// batchClients are both sources' batch modes. franz-go's group is eager
// here, as kafka-go's always is, so that a member that joins takes
// partitions from one that stopped answering (a paused member).
var batchClients = []batchClient{
	{"franz", func(t *testing.T, addr, group, topic string, r *batch.Runner, opts ...kafkagroup.Option) batchSource {
		s, err := franzsource.NewBatch(testenv.Context(t, 10*time.Second), []string{addr}, group, []string{topic}, r,
			kafkagroup.Options(batchGroupOptions(t)...), franzsource.GroupProtocol(franzsource.Eager), kafkagroup.Options(opts...))
		if err != nil {
			t.Fatalf("franzsource.NewBatch: %v", err)
		}
		return s
	}},
	{"kafka", func(t *testing.T, addr, group, topic string, r *batch.Runner, opts ...kafkagroup.Option) batchSource {
		s, err := kafkasource.NewBatch(testenv.Context(t, 10*time.Second), []string{addr}, group, []string{topic}, r,
			kafkagroup.Options(batchGroupOptions(t)...), kafkasource.JoinGroupBackoff(200*time.Millisecond), kafkagroup.Options(opts...))
		if err != nil {
			t.Fatalf("kafkasource.NewBatch: %v", err)
		}
		return s
	}},
}

// batchGroupOptions make a member that stops answering lose its
// partitions within seconds.
func batchGroupOptions(t testing.TB) []kafkagroup.Option {
	return []kafkagroup.Option{kafkagroup.HeartbeatInterval(200 * time.Millisecond), kafkagroup.SessionTimeout(6 * time.Second),
		kafkagroup.RebalanceTimeout(4 * time.Second), kafkagroup.RevokeTimeout(time.Second),
		kafkagroup.FetchMaxWait(200 * time.Millisecond), kafkagroup.WithLogger(testenv.Logger(t))}
}

// runBatch runs src until the returned stop, or the test's end; Run must
// return nil.
func runBatch(t *testing.T, src batchSource) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- src.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Error("Run did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// effectsOf is a handler whose write counts each record's effect, by
// record ID.
func effectsOf(e *grouptest.Effects) batch.HandlerFunc {
	return func(_ context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
		ws := make([]dedup.Write, len(msgs))
		for i, m := range msgs {
			ws[i] = e.Write(m.ID)
		}
		return ws, nil
	}
}

func newRunner(t *testing.T, s batch.Store, h batch.Handler, opts ...batch.Option) *batch.Runner {
	t.Helper()
	r, err := batch.NewRunner(s, h, append([]batch.Option{batch.Window(50 * time.Millisecond), batch.WithLogger(testenv.Logger(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// produceN produces n records, values v<from>..., to one partition of
// topic.
func produceN(t *testing.T, addr, topic string, partition int32, from, n int) {
	t.Helper()
	cl := client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: partition, Key: []byte(strconv.Itoa(from + i)), Value: []byte("v" + strconv.Itoa(from+i))}
	}
	produce(t, cl, recs...)
}

// storedNext is the partition's stored next offset, -1 without a row.
func storedNext(t *testing.T, s batch.Store, group, topic string, p int32) int64 {
	l, err := s.Offset(context.Background(), batch.Partition{Group: group, Topic: topic, Partition: p})
	if errors.Is(err, batch.ErrNotFound) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return l.Next
}

// Every record of two partitions has its effect exactly once; the stored
// next offsets reach the log ends, and the group's offsets follow them.
func TestBatchExactlyOnce(t *testing.T) {
	addr := testenv.KafkaBrokers(t)
	for _, c := range batchClients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			topic, group := topicName(t, "batch"), topicName(t, "group")
			createTopic(t, addr, topic, 2)
			produceN(t, addr, topic, 0, 0, 150)
			produceN(t, addr, topic, 1, 150, 50)
			store := memstoretest.New(t)
			e := grouptest.NewEffects()
			runBatch(t, c.open(t, addr, group, topic, newRunner(t, store.Offsets(), effectsOf(e), batch.MaxRecords(40))))
			testenv.Eventually(t, 30*time.Second, "every record's effect", func() bool { return e.Total() >= 200 })
			testenv.Eventually(t, 10*time.Second, "the stored offsets at the log ends", func() bool {
				return storedNext(t, store.Offsets(), group, topic, 0) == 150 && storedNext(t, store.Offsets(), group, topic, 1) == 50
			})
			testenv.Eventually(t, 10*time.Second, "the group's offsets following the Store's", func() bool {
				commit, end, err := committed(context.Background(), addr, group, topic)
				return err == nil && slices.Equal(commit, end)
			})
			e.ExactlyOnce(t, 200)
		})
	}
}

// A partition resumes from its stored offset, not the group's commit,
// whichever client stored it: the group's offset rewound to 0 between
// two members (one per client) re-runs nothing.
func TestBatchResumesFromTheStoredOffset(t *testing.T) {
	addr := testenv.KafkaBrokers(t)
	for _, pair := range [][2]batchClient{{batchClients[0], batchClients[1]}, {batchClients[1], batchClients[0]}} {
		first, second := pair[0], pair[1]
		t.Run(first.name+"_then_"+second.name, func(t *testing.T) {
			t.Parallel()
			topic, group := topicName(t, "batch"), topicName(t, "group")
			createTopic(t, addr, topic, 1)
			produceN(t, addr, topic, 0, 0, 50)
			store := memstoretest.New(t)
			e := grouptest.NewEffects()
			stop := runBatch(t, first.open(t, addr, group, topic, newRunner(t, store.Offsets(), effectsOf(e), batch.MaxRecords(20))))
			testenv.Eventually(t, 30*time.Second, "the first member's effects", func() bool {
				return storedNext(t, store.Offsets(), group, topic, 0) == 50
			})
			stop()

			// The group's offset rewound: a member that trusted it would
			// run the first 50 records again.
			adm := kadm.NewClient(client(t, addr))
			var rewind kadm.Offsets
			rewind.AddOffset(topic, 0, 0, -1)
			if err := adm.CommitAllOffsets(testenv.Context(t, 10*time.Second), group, rewind); err != nil {
				t.Fatalf("rewinding the group's offset: %v", err)
			}
			produceN(t, addr, topic, 0, 50, 30)
			runBatch(t, second.open(t, addr, group, topic, newRunner(t, store.Offsets(), effectsOf(e), batch.MaxRecords(20))))
			testenv.Eventually(t, 30*time.Second, "the second member's effects", func() bool {
				return storedNext(t, store.Offsets(), group, topic, 0) == 80
			})
			e.ExactlyOnce(t, 80)
		})
	}
}

// fenceLog records the Store's answers to commits, by member.
type fenceLog struct {
	batch.Store
	mu      sync.Mutex
	refused map[string][]error
}

func (f *fenceLog) Commit(ctx context.Context, c batch.Commit) error {
	err := f.Store.Commit(ctx, c)
	if err != nil {
		f.mu.Lock()
		f.refused[c.Lease.Member] = append(f.refused[c.Lease.Member], err)
		f.mu.Unlock()
	}
	return err
}

// A member paused in its handler (it does not see its partition go) is
// dropped by the group; another takes the partition and commits every
// record. When the paused member wakes, its batch's commit is refused with
// ErrFenced, and nothing of it is written.
func TestBatchZombieFenced(t *testing.T) {
	addr := testenv.KafkaBrokers(t)
	for _, c := range batchClients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			topic, group := topicName(t, "batch"), topicName(t, "group")
			createTopic(t, addr, topic, 1)
			produceN(t, addr, topic, 0, 0, 10)
			store := &fenceLog{Store: memstoretest.New(t).Offsets(), refused: map[string][]error{}}
			e := grouptest.NewEffects()
			paused, wake := make(chan struct{}), make(chan struct{})
			var once sync.Once
			zombie := batch.HandlerFunc(func(ctx context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
				once.Do(func() { close(paused) })
				<-wake // a paused process: it sees neither ctx nor the group
				return effectsOf(e)(ctx, msgs)
			})
			stopZombie := runBatch(t, c.open(t, addr, group, topic, newRunner(t, store, zombie)))
			select {
			case <-paused:
			case <-time.After(30 * time.Second):
				t.Fatal("the first member never got a batch")
			}
			runBatch(t, c.open(t, addr, group, topic, newRunner(t, store, effectsOf(e))))
			testenv.Eventually(t, 60*time.Second, "the second member's commits", func() bool {
				return storedNext(t, store, group, topic, 0) == 10
			})
			close(wake)
			testenv.Eventually(t, 30*time.Second, "the paused member's refused commit", func() bool {
				store.mu.Lock()
				defer store.mu.Unlock()
				for _, errs := range store.refused {
					if slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, batch.ErrFenced) }) {
						return true
					}
				}
				return false
			})
			stopZombie()
			e.ExactlyOnce(t, 10)
		})
	}
}

// A record whose handler fails is isolated: the records around it commit,
// and after its attempts it goes to the dead-letter topic with its reason;
// the partition's stored offset passes it.
func TestBatchFailingRecordDeadLettered(t *testing.T) {
	addr := testenv.KafkaBrokers(t)
	for _, c := range batchClients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			topic, group, dlq := topicName(t, "batch"), topicName(t, "group"), topicName(t, "dlq")
			createTopic(t, addr, topic, 1)
			createTopic(t, addr, dlq, 1)
			produceN(t, addr, topic, 0, 0, 20)
			store := memstoretest.New(t)
			e := grouptest.NewEffects()
			h := batch.HandlerFunc(func(ctx context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
				for _, m := range msgs {
					if string(m.Body) == "v7" {
						return nil, fmt.Errorf("order %s refused", m.Body)
					}
				}
				return effectsOf(e)(ctx, msgs)
			})
			r := newRunner(t, store.Offsets(), h, batch.MaxRecords(20), batch.MaxAttempts(2), batch.RetryDelay(10*time.Millisecond))
			runBatch(t, c.open(t, addr, group, topic, r, kafkagroup.DeadLetterTopic(dlq)))
			testenv.Eventually(t, 30*time.Second, "the partition's offset past every record", func() bool {
				return storedNext(t, store.Offsets(), group, topic, 0) == 20
			})
			e.ExactlyOnce(t, 19)
			if _, ok := e.Counts()[topic+"/0/7"]; ok {
				t.Fatal("the failing record had an effect")
			}
			dead := readAll(t, addr, dlq, 1)
			if string(dead[0].Value) != "v7" {
				t.Fatalf("dead letter %q, want v7", dead[0].Value)
			}
			var reason string
			for _, h := range dead[0].Headers {
				if h.Key == kafkagroup.ReasonHeader {
					reason = string(h.Value)
				}
			}
			if !strings.Contains(reason, "order v7 refused") {
				t.Fatalf("dead letter reason %q, want the handler's error", reason)
			}
		})
	}
}

// readAll reads want records from topic.
func readAll(t *testing.T, addr, topic string, want int) []*kgo.Record {
	t.Helper()
	cl := client(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	ctx := testenv.Context(t, 30*time.Second)
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s", len(out), want, topic)
		}
		out = append(out, fs.Records()...)
	}
	return out
}
