package kafkacore

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/broker"
)

type received struct {
	ms  []*broker.Message
	err error
}

// A Receive whose context ends as a message arrives leaves the message to a
// live Receive waiting beside it: the wake-up the message brought is not
// spent by the caller that is gone. With one processor, the cancel lands
// after the message woke the first waiter and before it ran, every time.
func TestReceiveCancelledAtArrivalLeavesWakeUp(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	synctest.Test(t, func(t *testing.T) {
		d, ps, _ := newTestDispatcher(t, 1)
		gone, cancel := context.WithCancel(t.Context())
		live, stopLive := context.WithCancel(t.Context())
		defer stopLive()
		first, second := make(chan received, 1), make(chan received, 1)
		go func() { ms, err := d.Receive(gone, 8); first <- received{ms, err} }()
		synctest.Wait() // the first caller waits before the second
		go func() { ms, err := d.Receive(live, 8); second <- received{ms, err} }()
		synctest.Wait()
		enqueueAll(t, d, ps[0], 1)
		cancel()
		synctest.Wait()
		if r := <-first; len(r.ms) != 0 || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled Receive: %d messages, %v; want none and context.Canceled", len(r.ms), r.err)
		}
		select {
		case r := <-second:
			if r.err != nil || len(r.ms) != 1 {
				t.Fatalf("live Receive: %d messages, %v; want the one queued", len(r.ms), r.err)
			}
		default:
			stopLive()
			<-second
			t.Fatal("the live Receive still waits with a message queued: the cancelled Receive spent its wake-up")
		}
	})
}

// The same race with the processors the machine has, many times over: the
// message goes to the live Receive or to the cancelled one; if to the
// cancelled one, it was handed to a caller whose context was over (counted
// apart, since the cancel may have landed after its check); never is it
// left queued with a live Receive waiting.
func TestReceiveCancelRaceNeverStrands(t *testing.T) {
	var stranded, handedToGone int
	const runs = 300
	for range runs {
		synctest.Test(t, func(t *testing.T) {
			d, ps, _ := newTestDispatcher(t, 1)
			gone, cancel := context.WithCancel(t.Context())
			live, stopLive := context.WithCancel(t.Context())
			defer stopLive()
			first, second := make(chan received, 1), make(chan received, 1)
			go func() { ms, err := d.Receive(gone, 8); first <- received{ms, err} }()
			synctest.Wait()
			go func() { ms, err := d.Receive(live, 8); second <- received{ms, err} }()
			synctest.Wait()
			enqueueAll(t, d, ps[0], 1)
			cancel()
			synctest.Wait()
			if r := <-first; len(r.ms) > 0 {
				handedToGone++
				return
			}
			select {
			case r := <-second:
				if len(r.ms) != 1 {
					t.Fatalf("live Receive: %d messages, %v; want the one queued", len(r.ms), r.err)
				}
			default:
				stranded++
				stopLive()
				<-second
			}
		})
	}
	if stranded > 0 {
		t.Errorf("of %d races, %d left the message queued with a live Receive waiting", runs, stranded)
	}
	// A message taken by the first Receive before the cancel landed was
	// taken by a live caller: allowed, only reported.
	t.Logf("of %d races, %d gave the message to the first Receive before its cancel landed", runs, handedToGone)
}

// After a cancelled Receive, a live one gets every queued message of a
// partition, in offset order.
func TestReceiveAfterCancelInOrder(t *testing.T) {
	d, ps, _ := newTestDispatcher(t, 2)
	enqueueAll(t, d, ps[0], 5)
	enqueueAll(t, d, ps[1], 5)
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	for range 3 {
		if ms, err := d.Receive(gone, 10); len(ms) != 0 || err == nil {
			t.Fatalf("cancelled Receive: %d messages, %v", len(ms), err)
		}
	}
	next := map[int32]int64{}
	ctx, stop := context.WithTimeout(t.Context(), 10*time.Second)
	defer stop()
	for got := 0; got < 10; {
		ms, err := d.Receive(ctx, 3)
		if err != nil {
			t.Fatalf("live Receive after %d of 10: %v", got, err)
		}
		for _, m := range ms {
			dl := m.Handle.(*Delivery[int64, struct{}])
			if dl.e.off != next[dl.e.p.ID] {
				t.Fatalf("partition %d: offset %d, want %d", dl.e.p.ID, dl.e.off, next[dl.e.p.ID])
			}
			next[dl.e.p.ID]++
			got++
		}
	}
}
