package awslambda

import (
	"context"
	"encoding/base64"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/kafkasource"
)

// A lease taken in an invocation, and its renewals, end no later than the
// invocation's deadline, whatever LeaseTTL says.
func TestLeaseCappedAtDeadline(t *testing.T) {
	mem := memstore.New()
	s := capLeases(mem)
	now := time.Now()
	limit := now.Add(3 * time.Second).Truncate(time.Second)
	ctx := withLimits(context.Background(), limits{leaseCap: limit, callsEnd: limit})
	c, err := s.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: "o1", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !c.Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	r, _ := mem.Get(context.Background(), "k")
	if r.ExpiresAt.After(limit) {
		t.Fatalf("lease until %v, want at most the deadline %v", r.ExpiresAt, limit)
	}
	// A renewal on a context of its own (as the Guard's heartbeat does).
	if err := s.Extend(context.Background(), dedup.ExtendRequest{Lease: c.Lease, Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	r, _ = mem.Get(context.Background(), "k")
	if r.ExpiresAt.After(limit) {
		t.Fatalf("renewed until %v, want at most the deadline %v", r.ExpiresAt, limit)
	}
	if !s.Capabilities().ClaimComplete {
		t.Error("the wrapper must declare its store's ClaimComplete (OneRoundTrip)")
	}
}

// A Kafka record maps as package kafka maps a fetched one, so the key is
// the same from either.
func TestKafkaMessageMatchesSource(t *testing.T) {
	km := kafkago.Message{Topic: "orders", Partition: 3, Offset: 42, Key: []byte("k1"), Value: []byte(`{"a":1}`),
		Headers: []kafkago.Header{{Key: "h", Value: []byte("v")}}}
	want := kafkasource.ToMessage(km, 1)
	got, err := kafkaMessage(&events.KafkaRecord{Topic: "orders", Partition: 3, Offset: 42,
		Key: base64.StdEncoding.EncodeToString(km.Key), Value: base64.StdEncoding.EncodeToString(km.Value),
		Headers: []map[string]events.JSONNumberBytes{{"h": []byte("v")}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != want.ID || got.OrderingKey != want.OrderingKey || string(got.Body) != string(want.Body) || got.Origin != want.Origin || got.Attributes["h"] != "v" {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	fw, _ := kafkasource.Fingerprint(want)
	fg, _ := kafkasource.Fingerprint(got)
	if fw != fg {
		t.Fatalf("fingerprints differ: %s vs %s", fg, fw)
	}
}

// Records of a standard queue run concurrently, never more than
// Concurrency at once.
func TestConcurrencyBound(t *testing.T) {
	const limit = 3
	var running, peak atomic.Int32
	full := make(chan struct{})
	var once sync.Once
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if n == limit {
			once.Do(func() { close(full) })
		}
		select { // hold until the bound is reached, so the peak is seen
		case <-full:
		case <-time.After(5 * time.Second):
		}
		return consumer.Result{}, nil
	})
	f, err := NewSQS(memstore.New(), h, Concurrency(limit))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	for i := range 10 {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: string(rune('a' + i)), Body: string(rune('a' + i)),
			EventSourceARN: "arn:aws:sqs:us-east-1:1:q"})
	}
	resp, err := f.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%+v %v", resp, err)
	}
	if p := peak.Load(); p != limit {
		t.Fatalf("at most %d handlers ran at once, want exactly the bound %d", p, limit)
	}
}

// misconfiguredStore fails every claim as a deployment fault would.
type misconfiguredStore struct{ dedup.Store }

func (misconfiguredStore) Claim(context.Context, dedup.ClaimRequest) (dedup.Claim, error) {
	return dedup.Claim{}, retry.WithClass(errors.New("table not found"), retry.Misconfigured)
}

// A Misconfigured outcome fails the invocation; no record is reported.
func TestMisconfiguredFailsInvocation(t *testing.T) {
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	f, err := NewSQS(misconfiguredStore{memstore.New()}, h)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "1", Body: "x"}}})
	if !errors.Is(err, consumer.ErrMisconfigured) {
		t.Fatalf("err %v, want one wrapping consumer.ErrMisconfigured", err)
	}
}

// A record not started before the margin is reported, not run.
func TestNoTimeLeft(t *testing.T) {
	var ran atomic.Int32
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		ran.Add(1)
		return consumer.Result{}, nil
	})
	f, err := NewSQS(memstore.New(), h, DeadlineMargin(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := f.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "1", Body: "x"}}})
	if err != nil || len(resp.BatchItemFailures) != 1 || ran.Load() != 0 {
		t.Fatalf("resp %+v err %v ran %d; want the record reported and not run", resp, err, ran.Load())
	}
}
