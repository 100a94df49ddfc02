package consumer_test

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/memsource"
)

// receivers wraps a Source and keeps what the consumer did with it: the
// most Receives under way at once, and the most messages held (received
// and not yet settled) at once.
type receivers struct {
	consumer.Source
	want int           // settles to count before done closes
	both chan struct{} // closed once two Receives are under way at once
	done chan struct{} // closed at the want-th settle

	twoOnce               sync.Once
	mu                    sync.Mutex
	running, mostRunning  int
	held, mostHeld, acked int
}

func (s *receivers) Receive(ctx context.Context, n int) ([]*broker.Message, error) {
	s.mu.Lock()
	s.running++
	s.mostRunning = max(s.mostRunning, s.running)
	if s.running == 2 {
		s.twoOnce.Do(func() { close(s.both) })
	}
	s.mu.Unlock()
	msgs, err := s.Source.Receive(ctx, n)
	s.mu.Lock()
	s.running--
	s.held += len(msgs)
	s.mostHeld = max(s.mostHeld, s.held)
	s.mu.Unlock()
	return msgs, err
}

func (s *receivers) Ack(ctx context.Context, m *broker.Message) error {
	s.mu.Lock()
	s.held--
	s.acked++
	if s.acked == s.want {
		close(s.done)
	}
	s.mu.Unlock()
	return s.Source.Ack(ctx, m)
}

// An unordered source is received from by several goroutines at once,
// which together hold no more than MaxInFlight; an ordered one by one
// goroutine, whose order of receiving is the order its keys run in.
func TestReceivers(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("an unordered source gets one receiving goroutine per core: this needs two")
	}
	const msgs, inFlight = 300, 4
	for name, ordering := range map[string]broker.Ordering{"unordered": consumer.Unordered, "by key": consumer.OrderByKey} {
		t.Run(name, func(t *testing.T) {
			q := memsourcetest.NewQueue(t, "receivers", memsource.Ordering(ordering))
			src := &receivers{Source: q.Source(), want: msgs, both: make(chan struct{}), done: make(chan struct{})}
			var mu sync.Mutex
			handled := map[string]int{}
			h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
				mu.Lock()
				handled[string(m.Body)]++
				mu.Unlock()
				return consumer.Result{}, nil
			})
			c, err := consumer.New(src, memstoretest.New(t), h, consumer.Concurrency(inFlight), consumer.MaxInFlight(inFlight),
				consumer.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			errc := make(chan error, 1)
			go func() { errc <- c.Run(ctx) }()
			if ordering == consumer.Unordered {
				// The queue is empty: every receiving goroutine waits in
				// Receive.
				select {
				case <-src.both:
				case <-time.After(10 * time.Second):
					t.Fatal("no two Receives were under way at once")
				}
			}
			for i := range msgs {
				out := memsource.Outgoing{Body: []byte("m" + strconv.Itoa(i)), Key: strconv.Itoa(i % 3)}
				if err := q.Send(t.Context(), out); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-src.done:
			case <-time.After(30 * time.Second):
				src.mu.Lock()
				t.Logf("acked %d held %d running %d stats %+v", src.acked, src.held, src.running, q.Stats())
				src.mu.Unlock()
				t.Fatal("not every message was acknowledged")
			}
			cancel()
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			src.mu.Lock()
			defer src.mu.Unlock()
			if src.mostHeld > inFlight {
				t.Errorf("%d messages held at once, over MaxInFlight %d", src.mostHeld, inFlight)
			}
			if ordering != consumer.Unordered && src.mostRunning != 1 {
				t.Errorf("%d Receives under way at once on an ordered source, want 1", src.mostRunning)
			}
			if len(handled) != msgs {
				t.Errorf("%d distinct messages handled, want %d", len(handled), msgs)
			}
			for body, n := range handled {
				if n != 1 {
					t.Errorf("%s handled %d times", body, n)
				}
			}
		})
	}
}
