package consumer_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/memsource"
)

// failReasons records the reasons of the Fails that reach the store, and
// refuses those refuse says no to, as a store whose column cannot hold
// them does (retry class Permanent).
type failReasons struct {
	dedup.Store
	refuse  func(reason string) bool
	mu      sync.Mutex
	reasons []string
}

func (s *failReasons) Fail(ctx context.Context, req dedup.FailRequest) error {
	s.mu.Lock()
	s.reasons = append(s.reasons, req.Reason)
	s.mu.Unlock()
	if s.refuse != nil && s.refuse(req.Reason) {
		return retry.WithClass(errors.New("invalid byte sequence for encoding UTF8"), retry.Permanent)
	}
	return s.Store.Fail(ctx, req)
}

func (s *failReasons) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reasons...)
}

func failingHandler(err error) consumer.Handler {
	return consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, err })
}

func process(t *testing.T, store dedup.Store, h consumer.Handler, opts ...consumer.GuardOption) consumer.Outcome {
	t.Helper()
	g, err := consumer.NewGuard(store, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g.Process(context.Background(), keyedMessage())
}

// A failure reason is cut at a character boundary, never through one: a
// store that keeps text would refuse the broken character.
func TestFailReasonCutAtCharacter(t *testing.T) {
	store := &failReasons{Store: memstoretest.New(t)}
	o := process(t, store, failingHandler(errors.New("x"+strings.Repeat("é", 2000))))
	if o.Kind != consumer.Retrying {
		t.Fatalf("outcome %v (%v), want retrying", o.Kind, o.Err)
	}
	rs := store.seen()
	if len(rs) != 1 || !utf8.ValidString(rs[0]) || len(rs[0]) > dedup.MaxReasonSize || len(rs[0]) < dedup.MaxReasonSize-1 {
		t.Fatalf("reasons sent %d, the first of %d bytes (valid UTF-8: %v); want one, valid, at most %d bytes",
			len(rs), len(rs[0]), utf8.ValidString(rs[0]), dedup.MaxReasonSize)
	}
}

// A Fail the store refuses for its reason is sent again with a plain
// one, so that the failed run is counted: the message cannot run forever
// uncounted.
func TestRefusedFailReasonRetriedPlain(t *testing.T) {
	store := &failReasons{Store: memstoretest.New(t), refuse: func(r string) bool { return strings.Contains(r, "poison") }}
	o := process(t, store, failingHandler(errors.New("poison \x00 text")))
	if o.Kind != consumer.Retrying {
		t.Fatalf("outcome %v (%v), want retrying", o.Kind, o.Err)
	}
	r, err := store.Get(context.Background(), o.IdempotencyKey)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != dedup.StatusFailed || r.Attempts != 1 || strings.Contains(r.LastError, "poison") || r.LastError == "" {
		t.Fatalf("record %s with %d attempts, reason %q: want FAILED, 1 attempt, the plain reason", r.Status, r.Attempts, r.LastError)
	}
}

// A store that refuses every Fail cannot count the message's attempts, so
// the message is dead-lettered with a reason that says so, rather than
// taken over and run again forever. Run sends it to the dead-letter queue.
func TestUnrecordableFailDeadLetters(t *testing.T) {
	refuseAll := func(string) bool { return true }
	o := process(t, &failReasons{Store: memstoretest.New(t), refuse: refuseAll}, failingHandler(errors.New("boom")))
	if o.Kind != consumer.DeadLettered || !strings.Contains(o.Err.Error(), "refused") || !strings.Contains(o.Err.Error(), "boom") {
		t.Fatalf("outcome %v (%v), want dead-lettered, saying the store refused the failure", o.Kind, o.Err)
	}

	q := memsourcetest.NewQueue(t, "unrecordable")
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("x")})
	c, err := consumer.New(q.Source(), &failReasons{Store: memstoretest.New(t), refuse: refuseAll}, failingHandler(errors.New("boom")))
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { return len(q.DeadLetters()) == 1 })
}

// A response over the store's limit is the handler's bug: the message is
// dead-lettered with a reason naming the limit, in both store modes, and
// nothing is committed.
func TestResponseOverLimitDeadLetters(t *testing.T) {
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("123456789")}, nil
	})
	for name, opts := range map[string][]consumer.GuardOption{"lease": nil, "one-round-trip": {consumer.OneRoundTrip()}} {
		t.Run(name, func(t *testing.T) {
			store := memstoretest.New(t, memstore.MaxResponseSize(8))
			o := process(t, store, h, opts...)
			var re *dedup.ResponseTooLargeError
			if o.Kind != consumer.DeadLettered || !errors.As(o.Err, &re) || re.Size != 9 || re.Max != 8 {
				t.Fatalf("outcome %v (%v), want dead-lettered with a *dedup.ResponseTooLargeError", o.Kind, o.Err)
			}
			if !strings.Contains(o.Reason(), "MaxResponseSize") {
				t.Fatalf("dead-letter reason %q does not name the limit", o.Reason())
			}
			if r, err := store.Get(context.Background(), o.IdempotencyKey); err == nil && r.Status == dedup.StatusCompleted {
				t.Fatalf("record %+v: the response was committed", r)
			}
		})
	}
}

// A nil business write is the handler's bug: dead-lettered, not a panic.
func TestNilWriteDeadLetters(t *testing.T) {
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Writes: []dedup.Write{(*memstore.Write)(nil)}}, nil
	})
	o := process(t, memstoretest.New(t), h)
	if o.Kind != consumer.DeadLettered || !errors.Is(o.Err, dedup.ErrNilWrite) {
		t.Fatalf("outcome %v (%v), want dead-lettered with ErrNilWrite", o.Kind, o.Err)
	}
}

// panickingStore panics in one method, as a Store with a bug does.
type panickingStore struct {
	dedup.Store
	in string
}

func (s panickingStore) maybe(m string) {
	if s.in == m {
		panic("store bug in " + m)
	}
}

func (s panickingStore) Check(ctx context.Context) error { s.maybe("Check"); return s.Store.Check(ctx) }
func (s panickingStore) Claim(ctx context.Context, r dedup.ClaimRequest) (dedup.Claim, error) {
	s.maybe("Claim")
	return s.Store.Claim(ctx, r)
}
func (s panickingStore) Complete(ctx context.Context, r dedup.CompleteRequest) error {
	s.maybe("Complete")
	return s.Store.Complete(ctx, r)
}
func (s panickingStore) Fail(ctx context.Context, r dedup.FailRequest) error {
	s.maybe("Fail")
	return s.Store.Fail(ctx, r)
}
func (s panickingStore) ClaimComplete(ctx context.Context, r dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	s.maybe("ClaimComplete")
	return s.Store.ClaimComplete(ctx, r)
}

// A panic in a Store call is recovered where the consumer calls it: a
// fault of the deployment (outcome Misconfigured, Run stops with
// ErrMisconfigured), logged with its stack, never the message's.
func TestStorePanicIsADeploymentFault(t *testing.T) {
	for _, tc := range []struct {
		in      string
		handler consumer.Handler
		opts    []consumer.GuardOption
	}{
		{"Claim", noopHandler(), nil},
		{"Complete", noopHandler(), nil},
		{"Fail", failingHandler(errors.New("boom")), nil},
		{"ClaimComplete", noopHandler(), []consumer.GuardOption{consumer.OneRoundTrip()}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var logs testenv.LogBuffer
			store := panickingStore{Store: memstoretest.New(t), in: tc.in}
			opts := append([]consumer.GuardOption{consumer.WithLogger(logs.Logger(slog.LevelInfo))}, tc.opts...)
			o := process(t, store, tc.handler, opts...)
			var pe *consumer.PanicError
			if o.Kind != consumer.Misconfigured || !errors.Is(o.Err, consumer.ErrMisconfigured) || !errors.As(o.Err, &pe) || pe.Call != tc.in {
				t.Fatalf("outcome %v (%v), want misconfigured with a *consumer.PanicError of %s", o.Kind, o.Err, tc.in)
			}
			if l := logs.String(); !strings.Contains(l, "store bug in "+tc.in) || !strings.Contains(l, "stack=") || !strings.Contains(l, "panickingStore") {
				t.Fatalf("log does not show the panic with its stack:\n%s", l)
			}
		})
	}

	// Under Run: stopped, the message kept and not dead-lettered.
	q := memsourcetest.NewQueue(t, "store-panic")
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("x")})
	c, err := consumer.New(q.Source(), panickingStore{Store: memstoretest.New(t), in: "Complete"}, noopHandler())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background()); !errors.Is(err, consumer.ErrMisconfigured) || !errors.Is(err, consumer.ErrPanicked) {
		t.Fatalf("Run = %v, want ErrMisconfigured from the panic", err)
	}
	if s := q.Stats(); len(q.DeadLetters()) != 0 || s.Acked != 0 || s.Ready+s.Delayed+s.InFlight != 1 {
		t.Fatalf("queue %+v, %d dead letters: want the message kept", s, len(q.DeadLetters()))
	}
	// A panicking Check is reported by Run as well.
	c, err = consumer.New(q.Source(), panickingStore{Store: memstoretest.New(t), in: "Check"}, noopHandler())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background()); !errors.Is(err, consumer.ErrMisconfigured) || !errors.Is(err, consumer.ErrPanicked) {
		t.Fatalf("Run with a panicking Check = %v, want ErrMisconfigured from the panic", err)
	}
}

// settled is a hook called on every settle.
type settled func(a consumer.Action, err error)

func (f settled) OnMessageSettled(_ context.Context, _ *consumer.Message, a consumer.Action, err error) {
	f(a, err)
}

// panickingSource panics in one method, as a Source with a bug does.
type panickingSource struct {
	*memsource.Source
	in string
}

func (s panickingSource) maybe(m string) {
	if s.in == m {
		panic("source bug in " + m)
	}
}

func (s panickingSource) Check(ctx context.Context) error {
	s.maybe("Check")
	return s.Source.Check(ctx)
}
func (s panickingSource) Receive(ctx context.Context, n int) ([]*consumer.Message, error) {
	s.maybe("Receive")
	return s.Source.Receive(ctx, n)
}
func (s panickingSource) Ack(ctx context.Context, m *consumer.Message) error {
	s.maybe("Ack")
	return s.Source.Ack(ctx, m)
}
func (s panickingSource) Close(ctx context.Context) error {
	s.maybe("Close")
	return s.Source.Close(ctx)
}

// A panic in a Source call is recovered where the consumer calls it: Run
// stops with ErrMisconfigured, the stack logged, the process alive.
func TestSourcePanicIsADeploymentFault(t *testing.T) {
	for _, in := range []string{"Check", "Receive", "Ack", "Close"} {
		t.Run(in, func(t *testing.T) {
			q := memsourcetest.NewQueue(t, "source-panic")
			_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("x")})
			var logs testenv.LogBuffer
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// Close runs at the stop: the run is stopped once the message is acked.
			acked := settled(func(a consumer.Action, err error) {
				if a == consumer.Ack && err == nil {
					cancel()
				}
			})
			c, err := consumer.New(panickingSource{q.Source(), in}, memstoretest.New(t), noopHandler(),
				consumer.WithLogger(logs.Logger(slog.LevelInfo)), consumer.WithHooks(acked))
			if err != nil {
				t.Fatal(err)
			}
			err = c.Run(ctx)
			var pe *consumer.PanicError
			if !errors.As(err, &pe) || pe.Call != in || pe.Seam != "source" {
				t.Fatalf("Run = %v, want a *consumer.PanicError of the source's %s", err, in)
			}
			if in != "Close" && !errors.Is(err, consumer.ErrMisconfigured) {
				t.Fatalf("Run = %v, want ErrMisconfigured", err)
			}
			if l := logs.String(); !strings.Contains(l, "source bug in "+in) || !strings.Contains(l, "stack=") {
				t.Fatalf("log does not show the panic with its stack:\n%s", l)
			}
			if len(q.DeadLetters()) != 0 {
				t.Fatal("a source panic dead-lettered the message")
			}
		})
	}
}
