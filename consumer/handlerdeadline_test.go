package consumer

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// The handlers a worker begins within one window share their deadline,
// which is never later than HandlerTimeout and at most the window
// earlier; each can still be cancelled alone (its lease lost), a shutdown
// ends them all as a shutdown, and a context with values of its message's
// own gets a deadline of its own.
func TestHandlersShareTheirWorkersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 10 * time.Second
		g, err := NewGuard(memstoretest.New(t), HandlerFunc(func(context.Context, *Message) (Result, error) { return Result{}, nil }),
			HandlerTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		worker, shutdown := context.WithCancel(context.Background())
		handlers := &sharedDeadlines{parent: worker, window: timeout / 10, after: timeout}
		defer handlers.stop()
		handlerCtx := func(parent context.Context) (context.Context, context.CancelFunc, time.Time) {
			a := &attempt{g: g, ctx: parent, run: &run{handlers: handlers}}
			start := time.Now()
			ctx, cancel := a.handlerContext(start)
			return ctx, cancel, start
		}

		first, cancelFirst, start := handlerCtx(worker)
		time.Sleep(timeout / 20)
		second, cancelSecond, _ := handlerCtx(worker)
		defer cancelSecond()
		d1, ok1 := first.Deadline()
		d2, ok2 := second.Deadline()
		if !ok1 || !ok2 || !d1.Equal(d2) {
			t.Fatalf("handlers begun in one window: deadlines %v (%v) and %v (%v), want one shared", d1, ok1, d2, ok2)
		}
		if d1.After(start.Add(timeout)) || d1.Before(start.Add(timeout-timeout/10)) {
			t.Fatalf("deadline %v after start, want within a tenth below %v", d1.Sub(start), timeout)
		}

		cancelFirst() // its lease was lost
		if first.Err() == nil || second.Err() != nil {
			t.Fatalf("one handler cancelled: errors %v and %v, want only the first ended", first.Err(), second.Err())
		}

		type key struct{}
		traced := context.WithValue(worker, key{}, "trace")
		own, cancelOwn, ownStart := handlerCtx(traced)
		defer cancelOwn()
		if d, _ := own.Deadline(); !d.Equal(ownStart.Add(timeout)) || own.Value(key{}) != "trace" {
			t.Fatalf("a context with values of its own: deadline %v after start, value %v; want %v and its value", d.Sub(ownStart), own.Value(key{}), timeout)
		}

		time.Sleep(timeout)
		if !errors.Is(second.Err(), context.DeadlineExceeded) || worker.Err() != nil {
			t.Fatalf("past the deadline: handler %v, worker %v; want the deadline error and the worker going on", second.Err(), worker.Err())
		}

		third, cancelThird, _ := handlerCtx(worker)
		defer cancelThird()
		shutdown()
		if !errors.Is(third.Err(), context.Canceled) {
			t.Fatalf("shutdown: handler %v, want cancelled", third.Err())
		}
	})
}
