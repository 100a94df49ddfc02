package franztxn_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/franztxn"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
)

// Every input's outputs reach a read_committed reader exactly once, each
// with the stable ID of its input and index, and the outputs of one input
// keep the handler's order.
func TestOutputsCommitExactlyOnce(t *testing.T) {
	addr := brokerAddr(t)
	in, out, group := names(t)
	createTopic(t, addr, in, 3)
	createTopic(t, addr, out, 2)
	const inputs, per = 300, 2
	produceInputs(t, addr, in, 0, inputs)
	committed := newReader(t, addr, out, true)
	c := &counter{}
	r := start(t, addr, group, in, group+"-a", fanOut(out, per), franztxn.MaxPollRecords(25), franztxn.WithHooks(c))
	testenv.Eventually(t, 60*time.Second, "every output read", func() bool { return committed.outputs() >= inputs*per })
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	recs := finish(t, addr, out, 2, committed)
	exactlyOnce(t, recs, inputs, per)
	next := map[string]int{}
	for _, rec := range recs {
		id := header(rec, "idempotency-key")
		in := id[:len(id)-len("#out0")]
		if n, _ := strconv.Atoi(header(rec, "n")); n != next[in] {
			t.Fatalf("output %d of %s read after %d of its outputs", n, in, next[in])
		}
		next[in]++
	}
	if n, aborted, _, _ := c.get(); n == 0 || aborted != 0 {
		t.Fatalf("transactions committed=%d aborted=%d, want some and none", n, aborted)
	}
}

// A handler's error aborts its transaction, and the records come again:
// those the client had fetched past it before the abort are neither
// skipped nor handled twice into the output.
func TestHandlerErrorAbortsAndRetries(t *testing.T) {
	addr := brokerAddr(t)
	in, out, group := names(t)
	createTopic(t, addr, in, 2)
	createTopic(t, addr, out, 1)
	const inputs = 400
	produceInputs(t, addr, in, 0, inputs)
	committed := newReader(t, addr, out, true)
	var failed atomic.Int32
	ok := fanOut(out, 1)
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		if m.IdempotencyKey == inputKey(123) && failed.Add(1) <= 2 {
			return consumer.Result{}, errors.New("a failure of the moment")
		}
		return ok.Handle(ctx, m)
	})
	c := &counter{}
	mp, metrics := meterProvider(t)
	// Small transactions, while a fetch buffers far more than one.
	r := start(t, addr, group, in, group+"-a", h, franztxn.MaxPollRecords(10), franztxn.Concurrency(1), franztxn.WithHooks(c),
		franztxn.WithMeterProvider(mp))
	testenv.Eventually(t, 60*time.Second, "every output read", func() bool { return committed.outputs() >= inputs })
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	recs := finish(t, addr, out, 1, committed)
	exactlyOnce(t, recs, inputs, 1)
	n, aborted, _, _ := c.get()
	if aborted != 2 {
		t.Fatalf("aborted transactions: %d, want 2 (the handler failed twice)", aborted)
	}
	if got, want := [2]int64{transactions(t, metrics, "committed"), transactions(t, metrics, "aborted")}, [2]int64{int64(n), 2}; got != want {
		t.Fatalf("onceq.kafka.transactions committed, aborted: %v, want %v", got, want)
	}
	if failed.Load() != 3 {
		t.Fatalf("the failing input was handled %d times, want 3", failed.Load())
	}
}

// A Result with Writes, an output to a topic that does not exist, or one
// larger than its topic takes, stops Run with a typed error naming the
// record; nothing of its transaction commits.
func TestMisuseStopsWithTypedError(t *testing.T) {
	addr := brokerAddr(t)
	for name, tc := range map[string]struct {
		res  func(out string) consumer.Result
		want error
	}{
		"writes": {func(out string) consumer.Result {
			return consumer.Result{Writes: []dedup.Write{foreignWrite("x")}, Outbox: []outbox.Message{{Destination: out, Body: []byte("x")}}}
		}, franztxn.ErrWritesUnsupported},
		"unknown destination": {func(string) consumer.Result {
			return consumer.Result{Outbox: []outbox.Message{{Destination: "no-such-topic-franztxn", Body: []byte("x")}}}
		}, franztxn.ErrUnknownTopic},
		"no destination": {func(string) consumer.Result {
			return consumer.Result{Outbox: []outbox.Message{{Body: []byte("x")}}}
		}, franztxn.ErrUnknownTopic},
		"too large": {func(out string) consumer.Result {
			// Random, so that no compression shrinks it below the limit.
			body := make([]byte, 20000)
			_, _ = rand.Read(body)
			return consumer.Result{Outbox: []outbox.Message{{Destination: out, Body: body}}}
		}, outbox.ErrRefused},
	} {
		t.Run(name, func(t *testing.T) {
			in, out, group := names(t)
			createTopic(t, addr, in, 1)
			createTopic(t, addr, out, 1, "max.message.bytes", "10000")
			produceInputs(t, addr, in, 0, 3)
			committed := newReader(t, addr, out, true)
			h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
				if m.IdempotencyKey == inputKey(2) {
					return tc.res(out), nil
				}
				return fanOut(out, 1).Handle(context.Background(), m)
			})
			err := start(t, addr, group, in, group+"-a", h).wait(t, 30*time.Second)
			var rerr *franztxn.RecordError
			if !errors.Is(err, tc.want) || !errors.As(err, &rerr) || rerr.Topic != in {
				t.Fatalf("Run: %v, want a *RecordError of %s wrapping %v", err, in, tc.want)
			}
			if recs := finish(t, addr, out, 1, committed); len(recs) != 0 {
				t.Fatalf("read %d committed outputs, want none", len(recs))
			}
		})
	}
}

// A handler's permanent error, or its panic, stops Run with the record
// named, its transaction aborted.
func TestPermanentErrorStops(t *testing.T) {
	addr := brokerAddr(t)
	bad := errors.New("malformed")
	for name, h := range map[string]consumer.HandlerFunc{
		"permanent": func(context.Context, *consumer.Message) (consumer.Result, error) {
			return consumer.Result{}, consumer.Permanent(bad)
		},
		"panic": func(context.Context, *consumer.Message) (consumer.Result, error) { panic(bad) },
	} {
		t.Run(name, func(t *testing.T) {
			in, out, group := names(t)
			createTopic(t, addr, in, 1)
			createTopic(t, addr, out, 1)
			produceInputs(t, addr, in, 0, 1)
			err := start(t, addr, group, in, group+"-a", h).wait(t, 30*time.Second)
			var rerr *franztxn.RecordError
			if !errors.Is(err, consumer.ErrPermanent) || !errors.As(err, &rerr) || rerr.Offset != 0 {
				t.Fatalf("Run: %v, want a *RecordError at offset 0, permanent", err)
			}
			if name == "permanent" && !errors.Is(err, bad) {
				t.Fatalf("Run: %v, want the handler's error wrapped", err)
			}
		})
	}
}

func TestNewRefusesBadArguments(t *testing.T) {
	addr := brokerAddr(t)
	in, _, group := names(t)
	createTopic(t, addr, in, 1)
	h := fanOut("x", 1)
	ctx := testenv.Context(t, 10*time.Second)
	for name, tc := range map[string]struct {
		topics []string
		txnID  string
		opts   []franztxn.Option
		want   error
	}{
		"no transactional ID": {[]string{in}, "", nil, franztxn.ErrInvalidConfig},
		"no topic":            {nil, "id", nil, franztxn.ErrInvalidConfig},
		"unknown topic":       {[]string{"no-such-topic-franztxn"}, "id", nil, franztxn.ErrUnknownTopic},
		"bad option":          {[]string{in}, "id", []franztxn.Option{franztxn.MaxPollRecords(0)}, franztxn.ErrInvalidConfig},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := franztxn.New(ctx, []string{addr}, group, tc.topics, tc.txnID, h, tc.opts...)
			if !errors.Is(err, tc.want) {
				if p != nil {
					p.Close()
				}
				t.Fatalf("New: %v, want %v", err, tc.want)
			}
		})
	}
}

// foreignWrite is a business write of no Store this test runs.
type foreignWrite string

func (foreignWrite) WriteKind() dedup.WriteKind { return "foreign" }
