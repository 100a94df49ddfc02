package franztxn_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/franztxn"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// brokerAddr is the Kafka broker of the test environment
// (ONCEQ_KAFKA_BROKERS), else a one-broker kfake cluster started for the
// test.
func brokerAddr(t testing.TB) string {
	t.Helper()
	if a := os.Getenv("ONCEQ_KAFKA_BROKERS"); a != "" {
		return a
	}
	c, err := kfake.NewCluster(kfake.Ports(0))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

func client(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// createTopic creates topic, with configs given as name, value pairs.
func createTopic(t testing.TB, addr, topic string, partitions int32, configs ...string) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	for i := 0; i+1 < len(configs); i += 2 {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = configs[i], kmsg.StringPtr(configs[i+1])
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testenv.Context(t, 10*time.Second), client(t, addr))
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// inputKey is the idempotency key of input i.
func inputKey(i int) string { return "in-" + strconv.Itoa(i) }

// produceInputs produces inputs from..to-1, each keyed (record key and
// idempotency-key header) by its number.
func produceInputs(t testing.TB, addr, topic string, from, to int) {
	t.Helper()
	if err := inputs(client(t, addr, kgo.ProducerLinger(0)), topic, from, to); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// inputs is produceInputs through cl, for a goroutine of the test.
func inputs(cl *kgo.Client, topic string, from, to int) error {
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i % 13)), Value: []byte(strconv.Itoa(i)),
			Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(inputKey(i))}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// fanOut returns per outputs to topic for each input.
func fanOut(topic string, per int) consumer.Handler {
	return consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		var res consumer.Result
		for j := range per {
			res.Outbox = append(res.Outbox, outbox.Message{Destination: topic, OrderingKey: m.OrderingKey,
				Body: fmt.Appendf(nil, "%s/%d", m.Body, j), Headers: map[string]string{"n": strconv.Itoa(j)}})
		}
		return res, nil
	})
}

// reader reads a topic from its start in the background, read_committed
// or not, until the test ends.
type reader struct {
	mu   sync.Mutex
	recs []*kgo.Record
}

func newReader(t testing.TB, addr, topic string, committed bool) *reader {
	t.Helper()
	level := kgo.ReadUncommitted()
	if committed {
		level = kgo.ReadCommitted()
	}
	cl := client(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(level), kgo.FetchMaxWait(100*time.Millisecond))
	r := &reader{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			r.mu.Lock()
			r.recs = append(r.recs, fs.Records()...)
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func (r *reader) snapshot() []*kgo.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*kgo.Record(nil), r.recs...)
}

// outputs counts the records read but the end markers.
func (r *reader) outputs() int {
	n := 0
	for _, rec := range r.snapshot() {
		if header(rec, "end") == "" {
			n++
		}
	}
	return n
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// finish marks the end of each of topic's partitions with a record
// produced outside any transaction, and waits until r has read them all:
// a read_committed reader reaches them only once every transaction
// before them has ended. It returns what r read before them.
func finish(t testing.TB, addr, topic string, partitions int32, r *reader) []*kgo.Record {
	t.Helper()
	cl := client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	for p := range partitions {
		rec := &kgo.Record{Topic: topic, Partition: p, Value: []byte("end"), Headers: []kgo.RecordHeader{{Key: "end", Value: []byte("1")}}}
		if err := cl.ProduceSync(testenv.Context(t, 10*time.Second), rec).FirstErr(); err != nil {
			t.Fatalf("produce end marker: %v", err)
		}
	}
	var out []*kgo.Record
	testenv.Eventually(t, 60*time.Second, "the end markers of every partition read", func() bool {
		out = out[:0]
		ends := map[int32]bool{}
		for _, rec := range r.snapshot() {
			if header(rec, "end") != "" {
				ends[rec.Partition] = true
				continue
			}
			out = append(out, rec)
		}
		return len(ends) == int(partitions)
	})
	return out
}

// exactlyOnce checks that recs hold the per outputs of each of inputs
// 0..inputs-1 exactly once, each with its stable ID, and nothing else.
func exactlyOnce(t testing.TB, recs []*kgo.Record, inputs, per int) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range recs {
		seen[header(r, "idempotency-key")]++
	}
	lost, doubled := 0, 0
	for i := range inputs {
		for j := range per {
			id := outbox.ID(inputKey(i), j)
			switch n := seen[id]; {
			case n == 0:
				lost++
			case n > 1:
				doubled += n - 1
			}
			delete(seen, id)
		}
	}
	if lost != 0 || doubled != 0 || len(seen) != 0 {
		t.Fatalf("outputs of %d inputs × %d: lost=%d doubled=%d unexpected=%d (read %d)", inputs, per, lost, doubled, len(seen), len(recs))
	}
}

// counter counts transactions and revokes through the Processor's hooks.
type counter struct {
	mu                 sync.Mutex
	committed, aborted int
	revoked, assigned  int
	lastErr            error
	// assigns counts every assignment callback, empty ones too, and
	// assignsAtRevoke their number at the last revoke: a member has
	// finished the rebalance that followed a revoke once it exceeds it.
	assigns, assignsAtRevoke int
}

func (c *counter) OnKafkaTransaction(_ context.Context, e franztxn.TransactionEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Committed {
		c.committed++
	} else {
		c.aborted++
		c.lastErr = e.Err
	}
}

func (c *counter) OnKafkaRevoke(context.Context, map[string][]int32, bool) {
	c.mu.Lock()
	c.revoked++
	c.assignsAtRevoke = c.assigns
	c.mu.Unlock()
}

// rejoined reports that a revoke came and the member's assignment after
// it too.
func (c *counter) rejoined() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.revoked > 0 && c.assigns > c.assignsAtRevoke
}

// OnKafkaAssign counts assignments that gave partitions.
func (c *counter) OnKafkaAssign(_ context.Context, tps map[string][]int32) {
	c.mu.Lock()
	c.assigns++
	for _, ps := range tps {
		if len(ps) > 0 {
			c.assigned++
			break
		}
	}
	c.mu.Unlock()
}

func (c *counter) get() (committed, aborted, revoked, assigned int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.committed, c.aborted, c.revoked, c.assigned
}

// fast makes rebalances and transactions end within a test's patience.
func fast() []franztxn.Option {
	return []franztxn.Option{franztxn.HeartbeatInterval(100 * time.Millisecond), franztxn.SessionTimeout(6 * time.Second),
		franztxn.RebalanceTimeout(10 * time.Second), franztxn.FetchMaxWait(200 * time.Millisecond),
		franztxn.TransactionTimeout(10 * time.Second), franztxn.RetryBackoff(10*time.Millisecond, 100*time.Millisecond)}
}

// running is a Processor run in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(t testing.TB, addr, group, topic, txnID string, h consumer.Handler, opts ...franztxn.Option) *running {
	t.Helper()
	base := append(fast(), franztxn.WithLogger(testenv.Logger(t)))
	p, err := franztxn.New(testenv.Context(t, 10*time.Second), []string{addr}, group, []string{topic}, txnID, h, append(base, opts...)...)
	if err != nil {
		t.Fatalf("franztxn.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends the Processor and returns what Run returned.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("Run did not return within 30s of its context's end")
		return nil
	}
}

// wait returns what Run returned on its own, within d.
func (r *running) wait(t testing.TB, d time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		close(r.done)
		return err
	case <-time.After(d):
		t.Fatalf("Run did not return within %v", d)
		return nil
	}
}

func names(t testing.TB) (in, out, group string) {
	return grouptest.TopicName(t, "in"), grouptest.TopicName(t, "out"), grouptest.TopicName(t, "group")
}

// openTransaction reports that a transaction still open has written
// records to topic: some partition's last stable offset is below its
// high watermark.
func openTransaction(t testing.TB, cl *kgo.Client, topic string, partitions int32) bool {
	t.Helper()
	ends := func(isolation int8) map[int32]int64 {
		req := kmsg.NewPtrListOffsetsRequest()
		req.IsolationLevel = isolation
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for p := range partitions {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(testenv.Context(t, 10*time.Second), cl)
		if err != nil {
			t.Fatalf("list offsets of %s: %v", topic, err)
		}
		out := map[int32]int64{}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode == 0 {
					out[rp.Partition] = rp.Offset
				}
			}
		}
		return out
	}
	stable, high := ends(1), ends(0)
	for p, h := range high {
		if stable[p] < h {
			return true
		}
	}
	return false
}
