package consumer_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/memsource"
)

// apiError stands for an AWS error: a code, as smithy-go's APIError has.
type apiError struct{ code string }

func (e apiError) Error() string     { return "api error " + e.code }
func (e apiError) ErrorCode() string { return e.code }

// deniedStore refuses every claim as an IAM policy without the permission
// would.
type deniedStore struct{ dedup.Store }

func (deniedStore) Claim(context.Context, dedup.ClaimRequest) (dedup.Claim, error) {
	return dedup.Claim{}, apiError{"AccessDeniedException"}
}

// A configuration fault met at run time stops Run with ErrMisconfigured;
// the message is given back, never dead-lettered, and no handler runs.
func TestMisconfiguredStoreStopsRun(t *testing.T) {
	q := memsourcetest.NewQueue(t, "denied")
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("valid")})
	var calls atomic.Int32
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		calls.Add(1)
		return consumer.Result{}, nil
	})
	c, err := consumer.New(q.Source(), deniedStore{memstoretest.New(t)}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Run(ctx)
	if !errors.Is(err, consumer.ErrMisconfigured) || ctx.Err() != nil {
		t.Fatalf("Run = %v (ctx %v), want ErrMisconfigured before the deadline", err, ctx.Err())
	}
	if calls.Load() != 0 || len(q.DeadLetters()) != 0 {
		t.Fatalf("%d handler runs, %d dead letters: want none", calls.Load(), len(q.DeadLetters()))
	}
	if s := q.Stats(); s.Ready+s.Delayed+s.InFlight != 1 || s.Acked != 0 {
		t.Fatalf("queue %+v: want the message kept", s)
	}
}

// checkFailingStore fails its Check, as a missing table does.
type checkFailingStore struct{ dedup.Store }

func (checkFailingStore) Check(context.Context) error {
	return apiError{"ResourceNotFoundException"}
}

// Run checks the store before it receives: nothing is delivered.
func TestCheckFailureStopsBeforeReceive(t *testing.T) {
	q := memsourcetest.NewQueue(t, "check")
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("valid")})
	c, err := consumer.New(q.Source(), checkFailingStore{memstoretest.New(t)}, noopHandler())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background()); !errors.Is(err, consumer.ErrMisconfigured) {
		t.Fatalf("Run = %v, want ErrMisconfigured", err)
	}
	if s := q.Stats(); s.Ready != 1 || s.InFlight != 0 {
		t.Fatalf("queue %+v: want the message never received", s)
	}
}

// misspelt implements no hook: OnMessageOutcome is misspelt.
type misspelt struct{}

func (misspelt) OnOutcom(context.Context, *consumer.Message, consumer.Outcome, time.Duration) {}

func TestMisspeltHookRefused(t *testing.T) {
	refused(t, consumer.WithHooks(misspelt{}))
	refused(t, consumer.WithHooks(nil))
}

// An outage holds the message in place: no redelivery, no attempt spent
// (MaxAttempts 1 would dead-letter a second handler run), processed once
// the store is back.
func TestStoreOutageHoldsMessage(t *testing.T) {
	q := memsourcetest.NewQueue(t, "outage")
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("valid")})
	// Claims fail as they do against an unreachable store.
	store := &failingStore{Store: memstoretest.New(t), claimErr: apiError{"InternalServerError"}}
	store.failures.Store(4)
	src := newCounting(t, q.Source(), nil)
	var outcomes sync.Map
	c, err := consumer.New(src, store, noopHandler(), consumer.MaxAttempts(1), consumer.FailedRetryDelay(10*time.Millisecond),
		consumer.WithHooks(outcomeRecorder{&outcomes}))
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { return q.Stats().Acked == 1 })
	if _, ok := outcomes.Load(consumer.StoreUnavailable); !ok {
		t.Fatal("no store_unavailable outcome: the outage was not seen")
	}
	if src.nacks != 0 || len(q.DeadLetters()) != 0 {
		t.Fatalf("%d nacks, %d dead letters: want the message held in place", src.nacks, len(q.DeadLetters()))
	}
}

// A handler that ignores its context is renewed only until HandlerTimeout
// plus a grace: then its lease runs out, another worker takes the key, and
// the late result is refused.
func TestHungHandlerLosesItsLease(t *testing.T) {
	store := memstoretest.New(t)
	led := newLedger()
	release := make(chan struct{})
	var n atomic.Int32
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		if n.Add(1) == 1 {
			<-release // ignores ctx
		}
		return consumer.Result{Writes: []dedup.Write{led.write("k")}}, nil
	})
	opts := []consumer.GuardOption{consumer.HandlerTimeout(100 * time.Millisecond), consumer.LeaseTTL(2100 * time.Millisecond),
		consumer.ClockSkewMargin(0), consumer.WithoutCompletedCache()}
	hung, other := rivalGuards(t, store, h, opts...)
	hungOut := make(chan consumer.Outcome, 1)
	go func() { hungOut <- hung.Process(context.Background(), keyedMessage()) }()
	for n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		o := other.Process(context.Background(), keyedMessage())
		if o.Kind == consumer.Processed {
			break
		}
		if o.Kind != consumer.InFlightElsewhere || time.Now().After(deadline) {
			t.Fatalf("other worker: %v (%v); want it to wait, then take over", o.Kind, o.Err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(release)
	o := <-hungOut
	if o.Kind != consumer.LeaseLost || !errors.Is(o.Err, consumer.ErrHandlerOverran) && !errors.Is(o.Err, dedup.ErrLeaseLost) {
		t.Fatalf("hung worker: %v (%v), want lease lost", o.Kind, o.Err)
	}
	if c := led.counts()["k"]; c != 1 {
		t.Fatalf("effect applied %d times, want once", c)
	}
}

// noDLQSource has nowhere to put dead letters.
type noDLQSource struct{ *memsource.Source }

func (s noDLQSource) Capabilities() consumer.Capabilities {
	c := s.Source.Capabilities()
	c.DeadLetter = false
	return c
}

func (noDLQSource) DeadLetter(context.Context, *consumer.Message, string) error {
	return broker.ErrNoDeadLetterDestination
}

type settleRecorder struct {
	mu   sync.Mutex
	errs map[consumer.Action][]error
}

func (r *settleRecorder) OnMessageSettled(_ context.Context, _ *consumer.Message, a consumer.Action, err error) {
	r.mu.Lock()
	r.errs[a] = append(r.errs[a], err)
	r.mu.Unlock()
}

func (r *settleRecorder) get(a consumer.Action) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs[a]...)
}

// Without a dead-letter destination New refuses the source unless told;
// told, a failed dead letter is reported as one (never as done) and the
// message is kept.
func TestDeadLetterWithoutDestination(t *testing.T) {
	q := memsourcetest.NewQueue(t, "no-dlq")
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("poison")})
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{}, consumer.Permanent(errors.New("bad input"))
	})
	src := noDLQSource{q.Source()}
	if _, err := consumer.New(src, memstoretest.New(t), h); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Fatalf("New without a dead-letter destination: %v, want ErrInvalidConfig", err)
	}
	rec := &settleRecorder{errs: map[consumer.Action][]error{}}
	c, err := consumer.New(src, memstoretest.New(t), h, consumer.WithoutDeadLetters(), consumer.WithHooks(rec))
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { return len(rec.get(consumer.DeadLetter)) > 0 })
	errs := rec.get(consumer.DeadLetter)
	if !errors.Is(errs[0], broker.ErrNoDeadLetterDestination) {
		t.Fatalf("dead letter settled with %v, want ErrNoDeadLetterDestination", errs[0])
	}
	if s := q.Stats(); s.Ready+s.Delayed+s.InFlight != 1 {
		t.Fatalf("queue %+v: want the message kept", s)
	}
}

// deniedReceive is a source whose queue access was taken away.
type deniedReceive struct{ *memsource.Source }

func (deniedReceive) Receive(context.Context, int) ([]*consumer.Message, error) {
	return nil, apiError{"AccessDenied"}
}

// A receive refused for a reason of the deployment stops Run at once,
// rather than retrying forever.
func TestMisconfiguredReceiveStopsRun(t *testing.T) {
	c, err := consumer.New(deniedReceive{memsourcetest.NewQueue(t, "gone").Source()}, memstoretest.New(t), noopHandler())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Run(ctx); !errors.Is(err, consumer.ErrMisconfigured) || ctx.Err() != nil {
		t.Fatalf("Run = %v (ctx %v), want ErrMisconfigured at once", err, ctx.Err())
	}
}

// slowCheckStore's Check waits for its context, as one against an
// unanswering endpoint does.
type slowCheckStore struct{ dedup.Store }

func (slowCheckStore) Check(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// A Run cancelled while it checks the store has been stopped, not
// misconfigured: it returns nil.
func TestCancelDuringCheckIsAStop(t *testing.T) {
	c, err := consumer.New(memsourcetest.NewQueue(t, "stop").Source(), slowCheckStore{memstoretest.New(t)}, noopHandler())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil after a cancel", err)
	}
}
