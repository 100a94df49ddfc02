package consumer_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/memsource"
)

// seamCalls records the calls a Source or a Store gets at start.
type seamCalls struct {
	mu       sync.Mutex
	calls    []string // "Capabilities", "Attach", "Check" in order
	runtimes []any    // each Attach's broker.Runtime or dedup.Runtime
}

func (r *seamCalls) add(call string, rt any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
	if rt != nil {
		r.runtimes = append(r.runtimes, rt)
	}
}

func (r *seamCalls) snapshot() ([]string, []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...), append([]any(nil), r.runtimes...)
}

type recordingSource struct {
	*memsource.Source
	seamCalls
	observe atomic.Pointer[func(retry.Class, error)]
}

func (s *recordingSource) Capabilities() broker.Capabilities {
	s.add("Capabilities", nil)
	return s.Source.Capabilities()
}

func (s *recordingSource) Attach(rt broker.Runtime) {
	s.add("Attach", rt)
	s.observe.Store(&rt.Observe)
	s.Source.Attach(rt)
}

func (s *recordingSource) Check(ctx context.Context) error {
	s.add("Check", nil)
	return s.Source.Check(ctx)
}

// Receive meets a throttle it retries, as an SQS call may.
func (s *recordingSource) Receive(ctx context.Context, max int) ([]*broker.Message, error) {
	if o := s.observe.Load(); o != nil {
		(*o)(retry.Throttled, nil)
	}
	return s.Source.Receive(ctx, max)
}

type recordingStore struct {
	*memstore.Store
	seamCalls
}

func (s *recordingStore) Capabilities() dedup.Capabilities {
	s.add("Capabilities", nil)
	return s.Store.Capabilities()
}

func (s *recordingStore) Attach(rt dedup.Runtime) {
	s.add("Attach", rt)
	s.Store.Attach(rt)
}

func (s *recordingStore) Check(ctx context.Context) error {
	s.add("Check", nil)
	return s.Store.Check(ctx)
}

// The consumer reads each seam's Capabilities once and hands it what it
// needs in one Attach, before Check: the Source its logger, the commit-hold
// bound and a throttle observer that lowers the pool's concurrency; the
// Store its logger and the same observer.
func TestRuntimeHandedOverOnceAtStart(t *testing.T) {
	q := memsourcetest.NewQueue(t, "runtime")
	src := &recordingSource{Source: q.Source()}
	store := &recordingStore{Store: memstoretest.New(t)}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := &limitRecorder{}
	rec.lowest.Store(1 << 30)
	_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("m")})
	c, err := consumer.New(src, store, noopHandler(), consumer.WithLogger(logger), consumer.Concurrency(8), consumer.WithHooks(rec),
		consumer.Retention(8*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { return q.Stats().Acked == 1 })

	calls, rts := src.snapshot()
	if !slices.Equal(calls, []string{"Capabilities", "Attach", "Check"}) {
		t.Fatalf("Source calls %v, want Capabilities, Attach, Check, once each", calls)
	}
	srt := rts[0].(broker.Runtime)
	if srt.Logger != logger || srt.CommitHold != 6*time.Hour || srt.Observe == nil {
		t.Fatalf("Source runtime %+v: want the consumer's logger, 3/4 of Retention and an observer", srt)
	}
	calls, rts = store.snapshot()
	if !slices.Equal(calls, []string{"Capabilities", "Attach", "Check"}) {
		t.Fatalf("Store calls %v, want Capabilities, Attach, Check, once each", calls)
	}
	if drt := rts[0].(dedup.Runtime); drt.Logger != logger || drt.Observe == nil {
		t.Fatalf("Store runtime %+v: want the consumer's logger and an observer", drt)
	}
	if lowest := rec.lowest.Load(); lowest >= 8 {
		t.Fatalf("the Source's throttles left the concurrency limit at %d, want it lowered under 8", lowest)
	}
}

// A Guard with no Consumer attaches its Store too, with no observer; a
// Store shared by two Guards is attached by each, and a logger is handed
// over only when one was given.
func TestGuardAttachesStore(t *testing.T) {
	store := &recordingStore{Store: memstoretest.New(t)}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := consumer.NewGuard(store, noopHandler(), consumer.WithLogger(logger)); err != nil {
		t.Fatal(err)
	}
	if _, err := consumer.NewGuard(store, noopHandler()); err != nil {
		t.Fatal(err)
	}
	calls, rts := store.snapshot()
	if !slices.Equal(calls, []string{"Capabilities", "Attach", "Capabilities", "Attach"}) {
		t.Fatalf("Store calls %v, want Capabilities and Attach once per Guard", calls)
	}
	first, second := rts[0].(dedup.Runtime), rts[1].(dedup.Runtime)
	if first.Logger != logger || first.Observe != nil || second.Logger != nil || second.Observe != nil {
		t.Fatalf("runtimes %+v and %+v: want the given logger, then none, and no observer", first, second)
	}
}

// panickyAttach is a Store whose Attach panics.
type panickyAttach struct{ *memstore.Store }

func (panickyAttach) Attach(dedup.Runtime) { panic("attach exploded") }

// A panic in Attach is an error of the configuration, not a crash.
func TestAttachPanicIsConfigError(t *testing.T) {
	if _, err := consumer.NewGuard(panickyAttach{memstoretest.New(t)}, noopHandler()); err == nil {
		t.Fatal("NewGuard over a Store whose Attach panics: no error")
	} else if !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Fatalf("NewGuard: %v, want ErrInvalidConfig", err)
	}
}
