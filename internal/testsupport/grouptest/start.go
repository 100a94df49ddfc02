package grouptest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// SilentBroker listens on a loopback port, accepts every connection, reads
// what the client sends and never answers: a broker that hangs. asked
// receives once per connection on which a request arrived, so a test
// knows the client is waiting for an answer. The test's end closes the
// listener and the connections, which ends the goroutines that read.
func SilentBroker(t testing.TB) (addr string, asked <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ch := make(chan struct{}, 64)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				buf := make([]byte, 4096)
				for first := true; ; first = false {
					if _, err := c.Read(buf); err != nil {
						return
					}
					if first {
						select {
						case ch <- struct{}{}:
						default:
						}
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String(), ch
}

// ReturnsOnCancel runs start (a source's New, or a Run) with a context
// that it cancels once the silent broker got a request (asked), and fails
// the test unless start then returns promptly with the context's error.
func ReturnsOnCancel(t *testing.T, asked <-chan struct{}, start func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	select {
	case <-asked:
	case err := <-done:
		t.Fatalf("returned before asking the broker anything: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("never asked the broker anything")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("returned %v after the context was cancelled, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting on the silent broker 5 s after its context was cancelled")
	}
}

// errJoinedDuringCheck is joinWatcher's refusal.
var errJoinedDuringCheck = errors.New("grouptest: the group was joined while the store was being checked")

// badStore is a store whose Check fails: it waits for the group to be
// joined (joined closed), up to the consumer's CheckTimeout, so that a
// source that joins before the store is checked is caught in the act.
type badStore struct {
	*memstore.Store
	joined <-chan struct{}
}

func (s badStore) Check(ctx context.Context) error {
	select {
	case <-s.joined:
		return errJoinedDuringCheck
	case <-ctx.Done():
		return fmt.Errorf("grouptest: store unreachable: %w", ctx.Err())
	}
}

// StoreCheckedFirst runs a consumer over src with a store whose Check
// fails, and fails the test if the group was joined (joined closed, as
// the broker saw it) before Run returned: a member with a bad store must
// not take partitions, nor make the group rebalance. Run must return the
// store's error. Run closes src.
func StoreCheckedFirst(t *testing.T, src consumer.Source, joined <-chan struct{}) {
	t.Helper()
	c, err := consumer.New(src, badStore{memstoretest.New(t), joined}, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{}, nil
	}), consumer.CheckTimeout(time.Second), consumer.WithLogger(testenv.Logger(t)), consumer.WithoutDeadLetters())
	if err != nil {
		t.Fatalf("consumer.New: %v", err)
	}
	err = c.Run(testenv.Context(t, 30*time.Second))
	if !errors.Is(err, consumer.ErrMisconfigured) {
		t.Fatalf("Run with a bad store: %v, want ErrMisconfigured", err)
	}
	select {
	case <-joined:
		t.Fatalf("the source joined the group before Run checked the store (Run: %v)", err)
	default:
	}
}

// Join makes a Kafka source join its group now, as a consumer's first
// Receive would: the sources join at the first Receive, and a test that
// waits for an assignment before receiving needs the member in the group.
// The Receive it calls returns at once (its context is already over) and
// takes nothing: a source not yet in the group holds no message.
func Join(t testing.TB, s consumer.Source) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if msgs, err := s.Receive(ctx, 1); len(msgs) != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("joining: Receive returned %d messages, %v", len(msgs), err)
	}
}
