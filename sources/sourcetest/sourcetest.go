package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// Outgoing is a message the suite publishes.
type Outgoing struct {
	Key        string
	Body       []byte
	Attributes map[string]string
}

// DeadLetter is what the suite finds at the dead-letter destination.
type DeadLetter struct {
	Body       []byte
	Attributes map[string]string
	Reason     string
}

// Harness is one fresh destination with a Source reading it.
type Harness struct {
	Source broker.Source
	// Send publishes to the destination Source reads.
	Send func(ctx context.Context, m Outgoing) error
	// Reopen returns a new Source over the same destination (and group).
	Reopen func(t *testing.T) broker.Source
	// DeadLetters reads what has been dead-lettered so far.
	DeadLetters func(ctx context.Context) ([]DeadLetter, error)
	// Redelivery bounds how soon an unsettled message comes back after its
	// Source was closed (the visibility timeout, a group rebalance).
	Redelivery time.Duration
}

// Run runs the suite. newHarness is called once per subtest.
func Run(t *testing.T, newHarness func(t *testing.T) *Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h *Harness)
	}{
		{"DeliversEveryMessage", testDelivers},
		{"ReceiveRespectsMax", testRespectsMax},
		{"AckedIsNotRedelivered", testAckedGone},
		{"NackRedeliversWithNextAttempt", testNackRedelivers},
		{"NackDelayHoldsBack", testNackDelay},
		{"NothingLostOnClose", testNothingLostOnClose},
		{"DeadLetterCarriesReason", testDeadLetter},
		{"DeclaredOrderingHolds", testOrdering},
		{"ReceiveHonoursContext", testReceiveContext},
		{"ReceiveAfterCloseFails", testReceiveAfterClose},
		{"WrapperKeepsDeadLetter", testWrapperDeadLetter},
		{"WrapperKeepsDeliveryTimeout", testWrapperDeliveryTimeout},
		{"WrapperKeepsRedeliveryWindow", testWrapperRedeliveryWindow},
		{"WrapperKeepsOrdering", testWrapperOrdering},
		{"WrapperKeepsDefaultKey", testWrapperDefaultKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			t.Cleanup(func() { _ = h.Source.Close(context.Background()) })
			tc.fn(t, h)
		})
	}
}

func send(t *testing.T, h *Harness, msgs ...Outgoing) {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	for _, m := range msgs {
		if err := h.Send(ctx, m); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
}

// receiveN receives until n messages arrived or the wait ends, without
// settling them. On a FIFO source that yields at most one per key.
func receiveN(t *testing.T, src broker.Source, n int, wait time.Duration) []*broker.Message {
	t.Helper()
	return receive(t, src, n, wait, false)
}

// drain receives until n messages arrived or the wait ends, acking each as
// it comes, as a FIFO source needs to let a key's next message through.
func drain(t *testing.T, src broker.Source, n int, wait time.Duration) []*broker.Message {
	t.Helper()
	return receive(t, src, n, wait, true)
}

func receive(t *testing.T, src broker.Source, n int, wait time.Duration, settle bool) []*broker.Message {
	t.Helper()
	ctx := testenv.Context(t, wait)
	var got []*broker.Message
	for len(got) < n {
		msgs, err := src.Receive(ctx, n-len(got))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatalf("receive: %v", err)
		}
		if len(msgs) > n-len(got) {
			t.Fatalf("Receive(max=%d) returned %d messages", n-len(got), len(msgs))
		}
		got = append(got, msgs...)
		if settle {
			ack(t, src, msgs...)
		}
	}
	return got
}

// expectNone asserts that nothing is delivered for d.
func expectNone(t *testing.T, src broker.Source, d time.Duration) {
	t.Helper()
	ctx := testenv.Context(t, d)
	for {
		msgs, err := src.Receive(ctx, 10)
		if len(msgs) > 0 {
			t.Fatalf("expected no delivery, got %q (delivery %d)", msgs[0].Body, msgs[0].Deliveries)
		}
		if err != nil || ctx.Err() != nil {
			return
		}
	}
}

func ack(t *testing.T, src broker.Source, msgs ...*broker.Message) {
	t.Helper()
	for _, m := range msgs {
		if err := src.Ack(context.Background(), m); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
}

func bodies(msgs []*broker.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Body)
	}
	slices.Sort(out)
	return out
}

func numbered(prefix string, n int) ([]Outgoing, []string) {
	out := make([]Outgoing, n)
	want := make([]string, n)
	for i := range out {
		want[i] = fmt.Sprintf("%s-%03d", prefix, i)
		out[i] = Outgoing{Key: fmt.Sprintf("k%d", i%4), Body: []byte(want[i]),
			Attributes: map[string]string{"idempotency-key": want[i], "n": fmt.Sprint(i)}}
	}
	slices.Sort(want)
	return out, want
}

func (h *Harness) wait() time.Duration { return h.Redelivery + 20*time.Second }

func testDelivers(t *testing.T, h *Harness) {
	out, want := numbered("deliver", 20)
	send(t, h, out...)
	got := drain(t, h.Source, len(out), h.wait())
	if !slices.Equal(bodies(got), want) {
		t.Fatalf("delivered %v, want %v", bodies(got), want)
	}
	for _, m := range got {
		if m.ID == "" || m.Origin.System == "" || m.Origin.Destination == "" {
			t.Errorf("message %q lacks identity: ID %q origin %+v", m.Body, m.ID, m.Origin)
		}
		if m.Deliveries != 1 {
			t.Errorf("message %q: first delivery has Deliveries %d", m.Body, m.Deliveries)
		}
		if m.Attributes["idempotency-key"] != string(m.Body) {
			t.Errorf("message %q: attributes %v lost", m.Body, m.Attributes)
		}
		if m.ReceivedAt.IsZero() {
			t.Errorf("message %q: no ReceivedAt", m.Body)
		}
	}
}

func testRespectsMax(t *testing.T, h *Harness) {
	out, _ := numbered("max", 12)
	send(t, h, out...)
	ctx := testenv.Context(t, h.wait())
	total := 0
	for total < len(out) {
		msgs, err := h.Source.Receive(ctx, 3)
		if err != nil {
			t.Fatalf("receive: %v (after %d)", err, total)
		}
		if len(msgs) > 3 {
			t.Fatalf("Receive(max=3) returned %d", len(msgs))
		}
		total += len(msgs)
		ack(t, h.Source, msgs...)
	}
}

func testAckedGone(t *testing.T, h *Harness) {
	out, _ := numbered("acked", 5)
	send(t, h, out...)
	got := drain(t, h.Source, len(out), h.wait())
	if len(got) != len(out) {
		t.Fatalf("received %d of %d", len(got), len(out))
	}
	expectNone(t, h.Source, h.Redelivery+time.Second)
}

func testNackRedelivers(t *testing.T, h *Harness) {
	send(t, h, Outgoing{Key: "k", Body: []byte("again"), Attributes: map[string]string{"a": "1"}})
	first := receiveN(t, h.Source, 1, h.wait())
	if len(first) != 1 {
		t.Fatal("message not delivered")
	}
	if err := h.Source.Nack(context.Background(), first[0], 0); err != nil {
		t.Fatalf("nack: %v", err)
	}
	second := receiveN(t, h.Source, 1, h.wait())
	if len(second) != 1 {
		t.Fatal("nacked message not redelivered")
	}
	if string(second[0].Body) != "again" || second[0].Attributes["a"] != "1" {
		t.Fatalf("redelivered %q %v", second[0].Body, second[0].Attributes)
	}
	if second[0].Deliveries != first[0].Deliveries+1 {
		t.Fatalf("redelivery Attempt %d after %d", second[0].Deliveries, first[0].Deliveries)
	}
	ack(t, h.Source, second...)
}

func testNackDelay(t *testing.T, h *Harness) {
	send(t, h, Outgoing{Key: "k", Body: []byte("later")})
	first := receiveN(t, h.Source, 1, h.wait())
	if len(first) != 1 {
		t.Fatal("message not delivered")
	}
	const delay = 3 * time.Second
	start := time.Now()
	if err := h.Source.Nack(context.Background(), first[0], delay); err != nil {
		t.Fatalf("nack: %v", err)
	}
	again := receiveN(t, h.Source, 1, h.wait()+delay)
	if len(again) != 1 {
		t.Fatal("nacked message not redelivered after its delay")
	}
	// Brokers count delays in whole seconds; allow one second of rounding.
	if waited := time.Since(start); waited < delay-time.Second {
		t.Fatalf("redelivered after %v, before the %v delay", waited, delay)
	}
	ack(t, h.Source, again...)
}

func testNothingLostOnClose(t *testing.T, h *Harness) {
	out, want := numbered("close", 6)
	send(t, h, out...)
	got := receiveN(t, h.Source, 3, h.wait())
	if len(got) == 0 {
		t.Fatal("nothing delivered")
	}
	if err := h.Source.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	src := h.Reopen(t)
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	again := drain(t, src, len(out), h.wait())
	if !slices.Equal(bodies(again), want) {
		t.Fatalf("after close and reopen got %v, want %v", bodies(again), want)
	}
}

func testDeadLetter(t *testing.T, h *Harness) {
	send(t, h, Outgoing{Key: "k", Body: []byte("poison"), Attributes: map[string]string{"idempotency-key": "p-1"}})
	got := receiveN(t, h.Source, 1, h.wait())
	if len(got) != 1 {
		t.Fatal("message not delivered")
	}
	if err := h.Source.DeadLetter(context.Background(), got[0], "bad input: not JSON"); err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	d := waitDeadLetter(t, h, "poison")
	if d.Reason != "bad input: not JSON" {
		t.Fatalf("dead letter reason %q", d.Reason)
	}
	if d.Attributes["idempotency-key"] != "p-1" {
		t.Fatalf("dead letter lost attributes: %v", d.Attributes)
	}
	expectNone(t, h.Source, h.Redelivery+time.Second)
}

// waitDeadLetter waits for a message with body to reach the dead letters.
func waitDeadLetter(t *testing.T, h *Harness, body string) DeadLetter {
	t.Helper()
	deadline := time.Now().Add(h.wait())
	for {
		dls, err := h.DeadLetters(testenv.Context(t, 30*time.Second))
		if err != nil {
			t.Fatalf("dead letters: %v", err)
		}
		if i := slices.IndexFunc(dls, func(d DeadLetter) bool { return string(d.Body) == body }); i >= 0 {
			return dls[i]
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %q not in the dead letters: %v", body, dls)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func testOrdering(t *testing.T, h *Harness) {
	if h.Source.Capabilities().Ordering == broker.Unordered {
		t.Skip("source declares no ordering")
	}
	const keys, per = 3, 6
	var out []Outgoing
	for i := range per {
		for k := range keys {
			out = append(out, Outgoing{Key: fmt.Sprintf("g%d", k), Body: []byte(fmt.Sprintf("g%d-%02d", k, i))})
		}
	}
	send(t, h, out...)
	ctx := testenv.Context(t, h.wait()*2)
	seen := map[string][]string{}
	for n := 0; n < len(out); {
		msgs, err := h.Source.Receive(ctx, len(out)-n)
		if err != nil {
			t.Fatalf("receive after %d: %v", n, err)
		}
		for _, m := range msgs {
			seen[m.OrderingKey] = append(seen[m.OrderingKey], string(m.Body))
		}
		n += len(msgs)
		ack(t, h.Source, msgs...)
	}
	for k := range keys {
		key := fmt.Sprintf("g%d", k)
		for i, b := range seen[key] {
			if want := fmt.Sprintf("%s-%02d", key, i); b != want {
				t.Fatalf("key %s delivered %v, out of order", key, seen[key])
			}
		}
	}
}

func testReceiveContext(t *testing.T, h *Harness) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	msgs, err := h.Source.Receive(ctx, 10)
	if len(msgs) != 0 {
		t.Fatalf("empty destination delivered %d", len(msgs))
	}
	if err == nil {
		t.Fatal("Receive on an expired context returned no error")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Receive ignored its context for %v", took)
	}
}

func testReceiveAfterClose(t *testing.T, h *Harness) {
	if err := h.Source.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := h.Source.Close(context.Background()); err != nil {
		t.Fatalf("second close: %v", err)
	}
	_, err := h.Source.Receive(testenv.Context(t, 5*time.Second), 1)
	if !errors.Is(err, broker.ErrSourceClosed) {
		t.Fatalf("Receive after Close: %v, want ErrSourceClosed", err)
	}
}
