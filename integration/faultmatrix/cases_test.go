package faultmatrix_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/smithy-go"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/sources/sqssource"
)

func init() {
	cases = append(cases,
		matrixCase{name: "missing-idempotency-table", run: missingIdempotencyTable},
		matrixCase{name: "missing-business-table", run: missingBusinessTable},
		matrixCase{name: "access-denied-idempotency-table", run: accessDeniedIdempotencyTable},
		matrixCase{name: "access-denied-business-table", run: accessDeniedBusinessTable},
		matrixCase{name: "dynamodb-down-30s", run: dynamoDBDown, slow: true},
		matrixCase{name: "crashed-holder-lease", run: crashedHolder, slow: true},
		matrixCase{name: "clock-skew", run: clockSkew},
		matrixCase{name: "handler-ignores-context", run: handlerIgnoresContext},
		matrixCase{name: "no-dead-letter-queue", run: noDeadLetterQueue},
	)
}

// misconfigured checks that err is Run's answer to a fault of the
// deployment, with DynamoDB's code.
func misconfigured(t *testing.T, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.Is(err, consumer.ErrMisconfigured) || !errors.As(err, &ae) || ae.ErrorCode() != code {
		t.Fatalf("Run = %v; want ErrMisconfigured with %s", err, code)
	}
}

// stopsAtStart runs a worker into a fault of the deployment that Run's
// checks find (DynamoDB's code): Run returns ErrMisconfigured before any
// receive, and the message stays in the queue, visible, never received.
// Once fix has removed the fault a new Run processes the message on its
// first delivery.
func (f *fixture) stopsAtStart(t *testing.T, code string, fix func()) string {
	t.Helper()
	f.send("order-1")
	w := f.start("first", f.store(), f.handler(nil))
	misconfigured(t, w.wait(t, 30*time.Second), code)
	if v, i, d := f.messages(f.queue); v != 1 || i+d != 0 {
		t.Fatalf("queue: %d visible, %d in flight, %d delayed; want the one message visible, never received", v, i, d)
	}
	if n, _ := f.rec.runStats(); n != 0 || f.rec.kinds() != "" {
		t.Fatalf("%d handler runs, outcomes %q: want none", n, f.rec.kinds())
	}
	fix()
	f.recover(t, 30*time.Second)
	if d, _ := f.rec.deliveryStats(); d != 1 {
		t.Fatalf("processed on delivery %d; want 1 (the failed run must not have received it)", d)
	}
	return "Run: ErrMisconfigured (" + code + ") before any receive; after the fix processed on its first delivery"
}

// stopsAtRunTime runs a worker into a fault of the deployment that only
// the message's own writes meet (DynamoDB's code): Run stops with
// ErrMisconfigured, the message is kept, not dead-lettered, and has no
// effect. Once fix has removed the fault a new Run processes it.
func (f *fixture) stopsAtRunTime(t *testing.T, code string, fix func()) string {
	t.Helper()
	f.send("order-1")
	w := f.start("first", f.store(), f.handler(nil))
	misconfigured(t, w.wait(t, 60*time.Second), code)
	if f.rec.count(consumer.Misconfigured) == 0 || f.held() != 1 || len(f.effects(t)) != 0 {
		t.Fatalf("outcomes %q, %d held, %d effects; want misconfigured, the message kept, no effect", f.rec.kinds(), f.held(), len(f.effects(t)))
	}
	first := f.rec.kinds()
	fix()
	f.recover(t, 60*time.Second)
	return "run 1: " + first + ", Run: ErrMisconfigured (" + code + "); after the fix processed"
}

// recover runs a new worker once the fault is gone, until every effect is
// in, and stops it.
func (f *fixture) recover(t *testing.T, d time.Duration) {
	t.Helper()
	w := f.start("after-fix", f.store(), f.handler(nil))
	f.waitEffects(t, d)
	if err := w.stop(); err != nil {
		t.Fatalf("Run after the fix: %v", err)
	}
}

// A missing idempotency table: Run's store check fails before any
// receive; once the table exists a new Run processes the message.
func missingIdempotencyTable(t *testing.T, f *fixture) string {
	f.ledgerTable()
	f.queues(0, true)
	return f.stopsAtStart(t, "ResourceNotFoundException", func() { f.idempotencyTable() })
}

// A missing business table: the transaction fails at run time, Run stops,
// the message is given back; after the table is created it is processed.
func missingBusinessTable(t *testing.T, f *fixture) string {
	f.idempotencyTable()
	f.queues(0, true)
	return f.stopsAtRunTime(t, "ResourceNotFoundException", f.ledgerTable)
}

// Access to the idempotency table denied: Run's store check fails before
// any receive; once access is back a new Run processes the message.
func accessDeniedIdempotencyTable(t *testing.T, f *fixture) string {
	f.tables()
	f.queues(0, true)
	f.proxy.AddRule(faultproxy.Rule{Table: f.idem, Fault: faultproxy.AccessDenied})
	return f.stopsAtStart(t, "AccessDeniedException", f.proxy.ClearRules)
}

// Access to the business table denied (its TransactWriteItems): Run stops
// at run time; once access is back a new Run processes the message.
func accessDeniedBusinessTable(t *testing.T, f *fixture) string {
	f.tables()
	f.queues(0, true)
	f.proxy.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Table: f.ledger, Fault: faultproxy.AccessDenied})
	return f.stopsAtRunTime(t, "AccessDeniedException", func() {
		if f.proxy.Injected(faultproxy.AccessDenied) == 0 {
			t.Fatal("the rule never fired")
		}
		f.proxy.ClearRules()
	})
}

// DynamoDB unreachable for 30 s mid-run (every connection reset): the
// messages are held, Run never stops, none is dead-lettered, and once
// DynamoDB is back every one is processed exactly once.
func dynamoDBDown(t *testing.T, f *fixture) string {
	f.tables()
	f.queues(0, true)
	f.send(keys("order", 200)...)
	h := f.handler(func(ctx context.Context, _ *consumer.Message, _ int) error {
		time.Sleep(50 * time.Millisecond) // some handlers are mid-run when DynamoDB goes
		return nil
	})
	w := f.start("worker", f.store(), h, consumer.Concurrency(8))
	waitFor(t, 30*time.Second, func() string {
		if n := f.rec.count(consumer.Processed); n < 40 {
			return fmt.Sprintf("%d processed before the outage, want 40", n)
		}
		return ""
	})
	f.proxy.AddRule(faultproxy.Rule{Fault: faultproxy.Reset})
	before := len(f.effects(t))
	time.Sleep(30 * time.Second) // the outage's length is the scenario; Run is checked to have lived through it
	if w.stopped() {
		t.Fatalf("Run stopped during the outage: %v", w.err)
	}
	f.proxy.ClearRules()
	f.waitEffects(t, 90*time.Second)
	if w.stopped() {
		t.Fatalf("Run stopped: %v", w.err)
	}
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if f.rec.count(consumer.StoreUnavailable) == 0 || f.proxy.Injected(faultproxy.Reset) == 0 {
		t.Fatalf("outcomes %q, %d resets: the outage was not seen", f.rec.kinds(), f.proxy.Injected(faultproxy.Reset))
	}
	_, again := f.rec.runStats()
	return fmt.Sprintf("%d of 200 done before the outage; held through it (%s); Run never stopped; handlers run again for %d messages",
		before, f.rec.kinds(), again)
}

// A worker killed while holding a key left a PENDING record with a 60 s
// lease. The message, delivered to a worker with the default LeaseTTL and
// HandlerTimeout, waits (held in place, then given back until the lease
// can have ended) and is processed once after the lease ends, on at most
// its second delivery.
func crashedHolder(t *testing.T, f *fixture) string {
	f.tables()
	f.queues(0, true)
	const key = "order-crashed"
	stored, err := dedup.Key("onceq", key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c, err := f.store().Claim(context.Background(), dedup.ClaimRequest{Key: stored, PayloadHash: dedup.PayloadHash(orderBody(key)),
		Owner: "crashed", Now: now, LeaseUntil: now.Add(60 * time.Second)})
	if err != nil || !c.Acquired {
		t.Fatalf("claim as the crashed worker: %+v, %v", c, err)
	}
	w := f.start("worker", f.store(), f.handler(nil))
	f.send(key)
	f.waitEffects(t, 100*time.Second)
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	done := f.rec.find(func(s seen) bool { return s.kind == consumer.Processed })
	if len(done) != 1 {
		t.Fatalf("%d processed outcomes, want 1", len(done))
	}
	after := done[0].at.Sub(now)
	// The lease ends at 60 s; the waiting message comes back after the
	// expiry plus ClockSkewMargin (5 s) plus 1 s, in whole seconds.
	if after < 60*time.Second || after > 75*time.Second {
		t.Fatalf("processed %v after the crashed claim; want after its lease ended (60 s) and soon after (≈66 s)", after.Round(time.Second))
	}
	if f.rec.runsOf(key) != 1 {
		t.Fatalf("%d handler runs, want 1", f.rec.runsOf(key))
	}
	return fmt.Sprintf("processed %v after the crash (%s)", after.Round(100*time.Millisecond), f.rec.kinds())
}

func orderBody(key string) []byte { return []byte(`{"order":"` + key + `"}`) }

// checkSkewRefusal judges the Run answer of a worker whose clock is off
// by more than ClockSkewMargin (5 s) against DynamoDB's: the documented
// outcome is that its claims are refused and it stops.
func checkSkewRefusal(t *testing.T, worker string, err error) {
	t.Helper()
	if !errors.Is(err, dynamostore.ErrClockSkew) || !errors.Is(err, consumer.ErrMisconfigured) {
		t.Errorf("worker %s: Run = %v; want ErrMisconfigured wrapping dynamostore.ErrClockSkew", worker, err)
	}
}

// skewMaxDeliveries bounds the clock-skew case's deliveries: a duplicate
// may be given back by both refused workers before the correct one
// settles it.
const skewMaxDeliveries = 3

// Clocks that disagree: while a correct worker holds the key (its handler
// slow), duplicates of the message reach a worker whose clock runs 10 s
// ahead, then one 60 s ahead. Whatever they do, the effect happens once
// and nothing is dead-lettered. (The documented outcome, once the store
// measures clocks against DynamoDB's: both skewed workers refuse to claim
// and stop with ErrMisconfigured wrapping dynamostore.ErrClockSkew; see
// checkSkewRefusal.)
func clockSkew(t *testing.T, f *fixture) string {
	f.maxDeliveries = skewMaxDeliveries
	f.tables()
	f.queues(0, true)
	const key = "order-skew"
	started := make(chan struct{})
	h := f.handler(func(ctx context.Context, _ *consumer.Message, run int) error {
		if run == 1 {
			close(started)
			select { // a slow handler that honours its context
			case <-time.After(10 * time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	one := []consumer.Option{consumer.Concurrency(1), consumer.MaxInFlight(1)} // a busy worker takes nothing more
	f.send(key)
	correct := f.start("correct", f.store(), h, one...)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the correct worker's handler never started")
	}
	saw := func(w *worker) func() string {
		return func() string {
			if len(f.rec.find(func(s seen) bool { return s.worker == w.name })) > 0 || w.stopped() {
				return ""
			}
			return "worker " + w.name + " saw nothing"
		}
	}
	var skewed []*worker
	for _, ahead := range []time.Duration{10 * time.Second, 60 * time.Second} {
		w := f.start(fmt.Sprintf("ahead-%v", ahead), f.store(), h, append(one, consumer.WithClock(offsetClock{ahead}))...)
		skewed = append(skewed, w)
		f.send(key) // a duplicate, for the skewed worker: the correct one is busy
		waitFor(t, 30*time.Second, saw(w))
	}
	f.waitEffects(t, 60*time.Second)
	waitFor(t, 60*time.Second, func() string {
		if n := f.held(); n > 0 {
			return fmt.Sprintf("%d duplicates not settled", n)
		}
		return ""
	})
	if err := correct.stop(); err != nil {
		t.Fatalf("correct worker: Run = %v", err)
	}
	outcome := "correct: " + f.kindsOf("correct")
	for _, w := range skewed {
		err := w.stop()
		checkSkewRefusal(t, w.name, err)
		outcome += fmt.Sprintf("; %s: %s (Run: %v)", w.name, f.kindsOf(w.name), err)
	}
	return outcome
}

// kindsOf lists one worker's outcomes in order.
func (f *fixture) kindsOf(worker string) string {
	out := ""
	for _, s := range f.rec.find(func(s seen) bool { return s.worker == worker }) {
		if out != "" {
			out += ","
		}
		out += s.kind.String()
	}
	return out
}

// A handler that ignores its context: renewals stop at HandlerTimeout
// plus the grace, its lease and its delivery run out, another worker
// processes the message, and the blocked handler's late result is refused.
func handlerIgnoresContext(t *testing.T, f *fixture) string {
	// The blocked worker's delivery, then at most two while the other
	// worker waits for its lease to end (one lease period).
	f.maxDeliveries = 3
	f.tables()
	f.queues(5*time.Second, true)
	const key = "order-hung"
	started := make(chan struct{})
	h := f.handler(func(_ context.Context, _ *consumer.Message, run int) error {
		if run == 1 {
			close(started)
			time.Sleep(15 * time.Second) // ignores its context
		}
		return nil
	})
	opts := []consumer.Option{consumer.HandlerTimeout(2 * time.Second), consumer.LeaseTTL(4200 * time.Millisecond),
		consumer.ClockSkewMargin(200 * time.Millisecond)}
	f.send(key)
	hung := f.start("hung", f.store(), h, append(opts, consumer.Concurrency(1), consumer.MaxInFlight(1))...)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the first handler never started")
	}
	began := time.Now()
	other := f.start("other", f.store(), h, opts...)
	f.waitEffects(t, 30*time.Second)
	tookOver := time.Since(began)
	var late []seen
	waitFor(t, 30*time.Second, func() string {
		if late = f.rec.find(func(s seen) bool { return s.worker == "hung" }); len(late) == 0 {
			return "the blocked handler's result was never judged"
		}
		return ""
	})
	if late[0].kind != consumer.LeaseLost || !errors.Is(late[0].err, consumer.ErrHandlerOverran) {
		t.Fatalf("blocked worker: %v (%v); want lease_lost with ErrHandlerOverran", late[0].kind, late[0].err)
	}
	if tookOver >= 15*time.Second {
		t.Fatalf("the other worker took over after %v, not while the handler was blocked", tookOver)
	}
	if n := f.rec.runsOf(key); n != 2 {
		t.Fatalf("%d handler runs, want 2 (the blocked one and the takeover)", n)
	}
	for _, w := range []*worker{hung, other} {
		if err := w.stop(); err != nil {
			t.Fatalf("worker %s: Run = %v", w.name, err)
		}
	}
	return fmt.Sprintf("taken over %v after the blocked run began; late result: %s (%v)", tookOver.Round(100*time.Millisecond),
		late[0].kind, late[0].err)
}

// A queue without a dead-letter queue: consumer.New refuses it unless
// told WithoutDeadLetters; then a poison message's dead letter fails, is
// reported as failed, and the message is kept in the queue.
func noDeadLetterQueue(t *testing.T, f *fixture) string {
	f.tables()
	f.queues(0, false)
	_, err := consumer.New(f.source(), f.store(), f.handler(nil))
	if !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Fatalf("consumer.New over a queue without a dead-letter queue: %v, want ErrInvalidConfig", err)
	}
	f.send("order-valid")
	f.sendPoison("poison-1")
	w := f.start("worker", f.store(), f.handler(nil), consumer.WithoutDeadLetters())
	f.waitEffects(t, 30*time.Second)
	var failed []settled
	waitFor(t, 30*time.Second, func() string {
		if failed = f.rec.settlesOf(consumer.DeadLetter); len(failed) == 0 {
			return "no dead letter settled"
		}
		return ""
	})
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !errors.Is(failed[0].err, sqssource.ErrNoDeadLetterQueue) {
		t.Fatalf("dead letter settled with %v; want it reported failed (sqssource.ErrNoDeadLetterQueue)", failed[0].err)
	}
	if n := f.held(); n != 1 {
		t.Fatalf("%d messages left in the queue; want the poison message kept", n)
	}
	// The broker seam's own sentinel, which package consumer documents and
	// tests with a fake source: reported, not required, of the real one.
	seam := errors.Is(failed[0].err, broker.ErrNoDeadLetterDestination)
	return fmt.Sprintf("New refused without WithoutDeadLetters; with it: %s, dead letter reported failed (%v; is broker.ErrNoDeadLetterDestination: %v), poison kept",
		f.rec.kinds(), failed[0].err, seam)
}
