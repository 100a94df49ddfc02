package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// The loop on kfake: resent payments (same idempotency-key header, new
// offsets) have their effect once, a poison record reaches the dead-letter
// topic with its reason, and the commits reach the log end.
func TestGuardedPollLoop(t *testing.T) {
	addr := startBroker(t)
	ctx := testenv.Context(t, time.Minute)
	prod := newProducer(t, addr)
	const unique, resent = 200, 100
	var recs []*kgo.Record
	for i := range unique + resent {
		n := i % unique
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "account-%d", n%7), Value: fmt.Appendf(nil, `{"payment":%d}`, n),
			Headers: []kgo.RecordHeader{{Key: consumer.IdempotencyKeyAttribute, Value: fmt.Appendf(nil, "pay-%d", n)}}})
	}
	recs = append(recs, &kgo.Record{Key: []byte("account-1"), Value: []byte("poison")})
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	effects := map[string]int{} // only the loop's goroutine writes, until it ends
	errPoison := errors.New("not a payment")
	guard, err := consumer.NewGuard(memstoretest.New(t), consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		if string(m.Body) == "poison" {
			return consumer.Result{}, consumer.Permanent(errPoison)
		}
		effects[m.Attributes[consumer.IdempotencyKeyAttribute]]++
		return consumer.Result{Response: []byte("ok")}, nil
	}), consumer.WithSourceKey(franzsource.Fingerprint, franzsource.KeyCoversBody))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := newClient([]string{addr}, "guarded", "payments", kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	loopCtx, stopLoop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- pollLoop(loopCtx, cl, "payments-dlq", guard) }()
	for committedTotal(ctx, prod) < int64(len(recs)) {
		if ctx.Err() != nil {
			t.Fatal("the loop did not commit every record")
		}
		time.Sleep(50 * time.Millisecond) // polling a condition under ctx's deadline
	}
	stopLoop()
	if err := <-done; err != nil {
		t.Fatalf("loop: %v", err)
	}
	cl.CloseAllowingRebalance()

	if len(effects) != unique {
		t.Fatalf("%d payments applied, want %d", len(effects), unique)
	}
	for k, n := range effects {
		if n != 1 {
			t.Errorf("%s applied %d times", k, n)
		}
	}
	dead := readDeadLetters(ctx, t, addr)
	if len(dead) != 1 || string(dead[0].Value) != "poison" || reason(dead[0]) != errPoison.Error() {
		t.Fatalf("%d dead letters, want the poison record with reason %q", len(dead), errPoison)
	}
}

func committedTotal(ctx context.Context, cl *kgo.Client) int64 {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = "guarded"
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = "payments", []int32{0, 1, 2}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0
	}
	var total int64
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			total += max(p.Offset, 0)
		}
	}
	return total
}

func readDeadLetters(ctx context.Context, t *testing.T, addr string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("payments-dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	readCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var out []*kgo.Record
	for readCtx.Err() == nil {
		out = append(out, cl.PollFetches(readCtx).Records()...)
	}
	return out
}

func reason(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == kafkagroup.ReasonHeader {
			return string(h.Value)
		}
	}
	return ""
}

// startBroker runs kfake with the payments topics until the test ends.
func startBroker(t *testing.T) string {
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(3, "payments", "payments-dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

func newProducer(t *testing.T, addr string) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("payments"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
