package idempotency_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/idempotency"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/retry"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type replays struct {
	mu       sync.Mutex
	got      [][]byte
	busyOnce sync.Once
	busy     chan struct{} // closed at the first repeat in progress
}

func newReplays() *replays { return &replays{busy: make(chan struct{})} }

func (r *replays) OnResponseReplayed(_ context.Context, _ string, resp []byte) {
	r.mu.Lock()
	r.got = append(r.got, resp)
	r.mu.Unlock()
}

func (r *replays) OnKeyInProgress(context.Context, string, time.Duration) {
	r.busyOnce.Do(func() { close(r.busy) })
}

func newRunner(t *testing.T, st dedup.Store, opts ...idempotency.Option) *idempotency.Runner {
	t.Helper()
	r, err := idempotency.New(st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A repeat gets the stored response, Replayed, without running the
// function, and the replay hook sees it; the function's writes commit once.
func TestDoReplaysStoredResponse(t *testing.T) {
	st := memstoretest.New(t)
	h := newReplays()
	r := newRunner(t, st, idempotency.WithHooks(h))
	var runs, applied atomic.Int32
	fn := func(ctx context.Context, tx *idempotency.Tx) ([]byte, error) {
		n := runs.Add(1)
		if err := tx.Write(memstore.Write{Apply: func() { applied.Add(1) }}); err != nil {
			return nil, err
		}
		return []byte{byte('0' + n)}, nil
	}
	ctx := context.Background()
	first, err := r.Do(ctx, "charge-1", []byte("10 EUR"), fn)
	if err != nil || first.Replayed || string(first.Response) != "1" {
		t.Fatalf("first call: %+v, %v", first, err)
	}
	again, err := r.Do(ctx, "charge-1", []byte("10 EUR"), fn)
	if err != nil || !again.Replayed || string(again.Response) != "1" {
		t.Fatalf("repeat: %+v, %v; want the stored response replayed", again, err)
	}
	if runs.Load() != 1 || applied.Load() != 1 {
		t.Errorf("function ran %d times, writes applied %d times; want once each", runs.Load(), applied.Load())
	}
	if len(h.got) != 1 || string(h.got[0]) != "1" {
		t.Errorf("replay hook saw %q, want the one replay", h.got)
	}
}

// The same key with another payload is ErrKeyReuse, whose text holds the
// key's hash, never the key.
func TestDoKeyReuse(t *testing.T) {
	r := newRunner(t, memstoretest.New(t))
	ok := func(context.Context, *idempotency.Tx) ([]byte, error) { return []byte("ok"), nil }
	if _, err := r.Do(context.Background(), "secret-key-1", []byte("a"), ok); err != nil {
		t.Fatal(err)
	}
	_, err := r.Do(context.Background(), "secret-key-1", []byte("b"), ok)
	if !errors.Is(err, idempotency.ErrKeyReuse) {
		t.Fatalf("err %v, want ErrKeyReuse", err)
	}
	if strings.Contains(err.Error(), "secret-key-1") {
		t.Errorf("the error names the key: %v", err)
	}
}

// A repeat while the first call runs fails at once with an
// *InProgressError, or, with Wait, waits and is given the first's answer.
func TestDoInProgress(t *testing.T) {
	for _, wait := range []bool{false, true} {
		name := "fails fast"
		var opts []idempotency.Option
		if wait {
			name, opts = "waits", []idempotency.Option{idempotency.Wait(time.Minute)}
		}
		t.Run(name, func(t *testing.T) {
			h := newReplays()
			r := newRunner(t, memstoretest.New(t), append(opts, idempotency.WithHooks(h))...)
			started, release := make(chan struct{}), make(chan struct{})
			var runs atomic.Int32
			fn := func(context.Context, *idempotency.Tx) ([]byte, error) {
				runs.Add(1)
				close(started)
				<-release
				return []byte("done"), nil
			}
			var wg sync.WaitGroup
			wg.Go(func() {
				if _, err := r.Do(context.Background(), "k", nil, fn); err != nil {
					t.Error(err)
				}
			})
			<-started
			if !wait {
				_, err := r.Do(context.Background(), "k", nil, fn)
				var ip *idempotency.InProgressError
				if !errors.As(err, &ip) || !errors.Is(err, idempotency.ErrInProgress) || ip.RetryAfter <= 0 || ip.RetryAfter > time.Second {
					t.Errorf("repeat in progress: %v, want an *InProgressError advising a retry within a second", err)
				}
				close(release)
				wg.Wait()
			} else {
				var res idempotency.Result
				var err error
				done := make(chan struct{})
				go func() { res, err = r.Do(context.Background(), "k", nil, fn); close(done) }()
				<-h.busy // the repeat has met the call in progress
				close(release)
				<-done
				wg.Wait()
				if err != nil || !res.Replayed || string(res.Response) != "done" {
					t.Errorf("waiting repeat: %+v, %v; want the first's answer replayed", res, err)
				}
			}
			if runs.Load() != 1 {
				t.Errorf("function ran %d times", runs.Load())
			}
		})
	}
}

// A function's error is returned as it is and stores nothing: a repeat
// runs the function again.
func TestDoFunctionErrorStoresNothing(t *testing.T) {
	r := newRunner(t, memstoretest.New(t))
	boom := errors.New("card declined by the network")
	var runs atomic.Int32
	fn := func(context.Context, *idempotency.Tx) ([]byte, error) {
		if runs.Add(1) == 1 {
			return nil, boom
		}
		return []byte("paid"), nil
	}
	if _, err := r.Do(context.Background(), "k", nil, fn); !errors.Is(err, boom) {
		t.Fatalf("err %v, want the function's", err)
	}
	res, err := r.Do(context.Background(), "k", nil, fn)
	if err != nil || res.Replayed || string(res.Response) != "paid" {
		t.Fatalf("repeat after a failure: %+v, %v; want the function run again", res, err)
	}
}

// outage is a Store whose claims fail as an outage does.
type outage struct{ dedup.Store }

func (outage) Claim(context.Context, dedup.ClaimRequest) (dedup.Claim, error) {
	return dedup.Claim{}, retry.WithClass(errors.New("connection refused"), retry.Transient)
}

// A store outage is a *StoreError of class Transient, and the function
// does not run.
func TestDoStoreOutage(t *testing.T) {
	r := newRunner(t, outage{memstoretest.New(t)}, idempotency.StoreRetryAfter(3*time.Second))
	ran := false
	_, err := r.Do(context.Background(), "k", nil, func(context.Context, *idempotency.Tx) ([]byte, error) { ran = true; return nil, nil })
	var se *idempotency.StoreError
	if !errors.As(err, &se) || !errors.Is(err, idempotency.ErrStoreUnavailable) || se.Class != retry.Transient ||
		retry.Classify(err) != retry.Transient || se.RetryAfter != 3*time.Second {
		t.Fatalf("err %v, want a Transient *StoreError advising 3s", err)
	}
	if ran {
		t.Error("the function ran while the store was out")
	}
}

// Write outside a call is ErrNotInCall; a bad configuration is refused.
func TestMisuse(t *testing.T) {
	if err := (*idempotency.Tx)(nil).Write(memstore.Write{}); !errors.Is(err, idempotency.ErrNotInCall) {
		t.Errorf("Write outside a call: %v", err)
	}
	if _, err := idempotency.New(memstoretest.New(t), idempotency.InProgressExpiry(time.Second)); err == nil {
		t.Error("an expiry of 1s was accepted")
	}
	if _, err := idempotency.New(memstoretest.New(t), idempotency.WithHooks(struct{}{})); err == nil {
		t.Error("a hook that implements nothing was accepted")
	}
}

// A business write refused by its own condition commits nothing, and the
// function's OnRejected answer is stored and replayed.
func TestDoRejectedByWriteCondition(t *testing.T) {
	r := newRunner(t, memstoretest.New(t))
	applied := false
	fn := func(ctx context.Context, tx *idempotency.Tx) ([]byte, error) {
		_ = tx.OnRejected([]byte("out of stock"))
		_ = tx.Write(memstore.Write{Check: func() error { return errors.New("stock is 0") }, Apply: func() { applied = true }})
		return []byte("reserved"), nil
	}
	res, err := r.Do(context.Background(), "k", nil, fn)
	if err != nil || !res.Rejected || string(res.Response) != "out of stock" || applied {
		t.Fatalf("%+v, %v, applied %v; want the rejection stored and nothing applied", res, err, applied)
	}
	again, err := r.Do(context.Background(), "k", nil, fn)
	if err != nil || !again.Replayed || string(again.Response) != "out of stock" {
		t.Fatalf("repeat: %+v, %v", again, err)
	}
}

// A repeat waits no longer than Wait's bound: then it fails with an
// *InProgressError, the first call still running.
func TestDoWaitIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRunner(t, memstoretest.New(t), idempotency.Wait(5*time.Second))
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = r.Do(context.Background(), "k", nil, func(context.Context, *idempotency.Tx) ([]byte, error) {
				close(started)
				<-release
				return nil, nil
			})
		}()
		<-started
		start := time.Now()
		_, err := r.Do(context.Background(), "k", nil, func(context.Context, *idempotency.Tx) ([]byte, error) { return nil, nil })
		waited := time.Since(start)
		if !errors.Is(err, idempotency.ErrInProgress) {
			t.Errorf("err %v, want ErrInProgress", err)
		}
		if waited < 4*time.Second || waited > 5*time.Second {
			t.Errorf("waited %v, want just under the 5s bound", waited)
		}
		close(release)
		<-done
	})
}

// The key is in no log line and no error text, only its hash.
func TestKeyNeverLogged(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := newRunner(t, memstoretest.New(t), idempotency.WithLogger(log))
	const key = "customer-4711@example.com"
	ok := func(context.Context, *idempotency.Tx) ([]byte, error) { return []byte("ok"), nil }
	var errs []error
	_, err := r.Do(context.Background(), key, []byte("a"), ok)
	errs = append(errs, err)
	_, err = r.Do(context.Background(), key, []byte("b"), ok) // key reuse: logged at WARN
	errs = append(errs, err)
	_, err = r.Do(context.Background(), key+"-2", nil, func(context.Context, *idempotency.Tx) ([]byte, error) { return nil, errors.New("declined") })
	errs = append(errs, err)
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "key_hash=") {
		t.Errorf("no key_hash in the log:\n%s", buf.String())
	}
	if strings.Contains(buf.String(), "customer-4711") {
		t.Errorf("the key is in the log:\n%s", buf.String())
	}
	for _, err := range errs {
		if err != nil && strings.Contains(err.Error(), "customer-4711") {
			t.Errorf("the key is in an error: %v", err)
		}
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// claims counts the Store's claims.
type claims struct {
	dedup.Store
	n atomic.Int32
}

func (c *claims) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	c.n.Add(1)
	return c.Store.Claim(ctx, req)
}

// A repeat asks the Store, unless CompletedCache keeps the response in
// memory.
func TestCompletedCache(t *testing.T) {
	for _, cached := range []bool{false, true} {
		st := &claims{Store: memstoretest.New(t)}
		var opts []idempotency.Option
		if cached {
			opts = append(opts, idempotency.CompletedCache(100, 1<<20))
		}
		r := newRunner(t, st, opts...)
		ok := func(context.Context, *idempotency.Tx) ([]byte, error) { return []byte("ok"), nil }
		for range 3 {
			if _, err := r.Do(context.Background(), "k", nil, ok); err != nil {
				t.Fatal(err)
			}
		}
		want := int32(3)
		if cached {
			want = 1
		}
		if got := st.n.Load(); got != want {
			t.Errorf("cache %v: %d claims for a call and two repeats, want %d", cached, got, want)
		}
	}
}
