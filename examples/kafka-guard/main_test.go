package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The loop on a real broker: duplicates (same idempotency-key header, new
// offsets) have their effect once, a poison record goes to the dead-letter
// topic with its reason, and every offset ends committed.
func TestGuardedLoopOnKafka(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(3, "payments", "payments-dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	addr := cluster.ListenAddrs()[0]
	tr := &kgo.Transport{}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const unique, dups = 200, 100
	var records []kgo.Message
	payment := func(i int) kgo.Message {
		return kgo.Message{Key: fmt.Appendf(nil, "account-%d", i%7), Value: fmt.Appendf(nil, `{"payment":%d}`, i),
			Headers: []kgo.Header{{Key: consumer.IdempotencyKeyAttribute, Value: fmt.Appendf(nil, "pay-%d", i)}}}
	}
	for i := range unique {
		records = append(records, payment(i))
	}
	for i := range dups {
		records = append(records, payment(i*3%unique)) // a producer's resend: a new offset
	}
	records = append(records, kgo.Message{Key: []byte("account-1"), Value: []byte("poison")})
	w := &kgo.Writer{Addr: kgo.TCP(addr), Topic: "payments", Transport: tr, Balancer: &kgo.Hash{}, RequiredAcks: kgo.RequireAll, BatchTimeout: time.Millisecond}
	if err := w.WriteMessages(ctx, records...); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()

	var mu sync.Mutex
	effects := map[string]int{}
	errPoison := errors.New("not a payment")
	guard, err := consumer.NewGuard(memstoretest.New(t), consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		if string(m.Body) == "poison" {
			return consumer.Result{}, consumer.Permanent(errPoison)
		}
		mu.Lock()
		effects[m.Attributes[consumer.IdempotencyKeyAttribute]]++
		mu.Unlock()
		return consumer.Result{Response: []byte("ok")}, nil
	}), consumer.WithSourceKey(kafkasource.Fingerprint, kafkasource.KeyCoversBody))
	if err != nil {
		t.Fatal(err)
	}
	r := kgo.NewReader(kgo.ReaderConfig{Brokers: []string{addr}, GroupID: "guarded", Topic: "payments",
		StartOffset: kgo.FirstOffset, MaxWait: 50 * time.Millisecond,
		HeartbeatInterval: 200 * time.Millisecond, SessionTimeout: 6 * time.Second, RebalanceTimeout: 2 * time.Second, JoinGroupBackoff: 100 * time.Millisecond, ErrorLogger: kgo.LoggerFunc(t.Logf)})
	dlq := &kgo.Writer{Addr: kgo.TCP(addr), Topic: "payments-dlq", Transport: tr, RequiredAcks: kgo.RequireAll, BatchTimeout: time.Millisecond}
	loopCtx, stopLoop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- processLoop(loopCtx, r, dlq, guard) }()

	// Done when the group's committed offsets reach the end of the log.
	client := &kgo.Client{Addr: kgo.TCP(addr), Transport: tr}
	for committedTotal(ctx, t, client) < int64(len(records)) {
		if ctx.Err() != nil {
			t.Fatal("the loop did not commit every record")
		}
		time.Sleep(50 * time.Millisecond) // polling a condition under ctx's deadline
	}
	stopLoop()
	if err := <-done; err != nil {
		t.Fatalf("loop: %v", err)
	}
	_ = r.Close()
	_ = dlq.Close()

	if len(effects) != unique {
		t.Fatalf("%d payments applied, want %d", len(effects), unique)
	}
	for k, n := range effects {
		if n != 1 {
			t.Errorf("%s applied %d times", k, n)
		}
	}
	dead := readAll(ctx, t, addr, "payments-dlq")
	if len(dead) != 1 || string(dead[0].Value) != "poison" || header(dead[0], kafkagroup.ReasonHeader) != errPoison.Error() {
		t.Fatalf("dead letters %+v, want the poison record with reason %q", dead, errPoison)
	}
}

func committedTotal(ctx context.Context, t *testing.T, c *kgo.Client) int64 {
	resp, err := c.OffsetFetch(ctx, &kgo.OffsetFetchRequest{GroupID: "guarded", Topics: map[string][]int{"payments": {0, 1, 2}}})
	if err != nil {
		t.Logf("offset fetch: %v", err)
		return 0
	}
	var total int64
	for _, p := range resp.Topics["payments"] {
		if p.CommittedOffset > 0 {
			total += p.CommittedOffset
		}
	}
	return total
}

func readAll(ctx context.Context, t *testing.T, addr, topic string) []kgo.Message {
	t.Helper()
	r := kgo.NewReader(kgo.ReaderConfig{Brokers: []string{addr}, GroupID: "reader-" + topic, Topic: topic, StartOffset: kgo.FirstOffset, MaxWait: 50 * time.Millisecond,
		HeartbeatInterval: 200 * time.Millisecond, SessionTimeout: 6 * time.Second, RebalanceTimeout: 2 * time.Second, JoinGroupBackoff: 100 * time.Millisecond})
	defer func() { _ = r.Close() }()
	var out []kgo.Message
	for {
		readCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
		m, err := r.FetchMessage(readCtx)
		cancel()
		if err != nil {
			return out
		}
		out = append(out, m)
	}
}

func header(m kgo.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
