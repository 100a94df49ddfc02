package consumer

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Limit is the current limit.
func (l *limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.limit)
}

// pacing reports the least time between starts (0: not pacing).
func (l *limiter) pacing() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.interval
}

func TestLimiterAIMD(t *testing.T) {
	var seen []int
	l := newLimiter(16, func(n int) { seen = append(seen, n) })
	now := time.Now()
	l.throttled(now)
	if got := l.Limit(); got != 11 {
		t.Fatalf("after a throttle the limit is %d, want 16×0.7 → 11", got)
	}
	l.throttled(now.Add(50 * time.Millisecond)) // the same burst
	if got := l.Limit(); got != 11 {
		t.Fatalf("a second throttle within the cooldown cut again: %d", got)
	}
	for range 7 {
		now = now.Add(time.Hour)
		l.throttled(now)
	}
	if got := l.Limit(); got != 1 || l.pacing() != 0 {
		t.Fatalf("the limit fell to %d (pacing %v), want the floor 1 and no pacing yet", got, l.pacing())
	}
	// Successes grow it by about one per round of work, up to the ceiling.
	later := now.Add(time.Second)
	for range 400 {
		if !l.acquire(nil) {
			t.Fatal("acquire refused")
		}
		l.release(later)
	}
	if got := l.Limit(); got != 16 {
		t.Fatalf("after many successes the limit is %d, want 16", got)
	}
	if len(seen) == 0 || seen[0] != 11 {
		t.Fatalf("changes reported %v", seen)
	}
}

// At the floor a throttle paces starts; further throttles slow the pace,
// starts without throttles quicken it until pacing ends.
func TestLimiterPacesAtTheFloor(t *testing.T) {
	l := newLimiter(1, nil)
	t0 := time.Now()
	l.mu.Lock()
	for i := range 11 { // starts every 4ms: the rate seen before pacing
		l.startedLocked(t0.Add(time.Duration(i) * 4 * time.Millisecond))
	}
	l.mu.Unlock()
	at := t0.Add(time.Second)
	l.throttled(at)
	first := l.pacing()
	if first <= 0 || l.Limit() != 1 {
		t.Fatalf("a throttle at the floor: pacing %v, limit %d", first, l.Limit())
	}
	l.throttled(at.Add(50 * time.Millisecond)) // the same burst
	if l.pacing() != first {
		t.Fatalf("a throttle within the cooldown slowed the pace again: %v → %v", first, l.pacing())
	}
	at = at.Add(time.Second)
	l.throttled(at)
	slower := l.pacing()
	if slower <= first {
		t.Fatalf("a second throttle left the interval at %v (was %v)", slower, first)
	}
	l.mu.Lock()
	if next := l.next.Sub(at); next != slower {
		t.Fatalf("next start %v after the throttle, want the interval %v", next, slower)
	}
	// Throttles whatever the rate slow it to a floor, not to a stop.
	for i := range 30 {
		l.mu.Unlock()
		l.throttled(at.Add(time.Duration(i+1) * time.Second))
		l.mu.Lock()
	}
	// 4ms between starts before pacing: the floor is a quarter of that rate.
	if floor := l.interval; floor < 15*time.Millisecond || floor > 17*time.Millisecond {
		l.mu.Unlock()
		t.Fatalf("after 30 throttles the interval is %v, want the floor of about 16ms", floor)
	}
	at = at.Add(31 * time.Second)
	// Unthrottled starts at the paced interval raise the rate.
	at = at.Add(limiterCooldown)
	for range 50 {
		at = at.Add(l.interval)
		l.startedLocked(at)
	}
	quicker := l.interval
	// Starts far apart (the limit or the load binds, not the pace) end it.
	for range 50 {
		at = at.Add(3 * l.interval)
		l.startedLocked(at)
		if l.interval == 0 {
			break
		}
	}
	interval := l.interval
	l.mu.Unlock()
	if quicker <= 0 || quicker >= 16*time.Millisecond {
		t.Fatalf("unthrottled starts left the interval at %v (was the floor, 16ms)", quicker)
	}
	if interval != 0 {
		t.Fatalf("pacing did not end with starts at a third of its pace: interval %v", interval)
	}
}

// A throttle within the cooldown does not cut, but holds growth off.
func TestLimiterThrottleHoldsGrowth(t *testing.T) {
	l := newLimiter(16, nil)
	now := time.Now()
	l.throttled(now) // 16 → 11.2
	l.throttled(now.Add(150 * time.Millisecond))
	for range 50 {
		l.acquire(nil)
		l.release(now.Add(300 * time.Millisecond)) // 150ms after the last throttle
	}
	if got := l.Limit(); got != 11 {
		t.Fatalf("the limit grew to %d within a cooldown of a throttle", got)
	}
}

func TestLimiterServesInArrivalOrder(t *testing.T) {
	l := newLimiter(1, nil)
	if !l.acquire(nil) {
		t.Fatal("first acquire refused")
	}
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			if l.acquire(nil) {
				order <- i
			}
		}()
		for { // queued before the next one starts
			l.mu.Lock()
			n := len(l.queue)
			l.mu.Unlock()
			if n == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	for want := range 3 {
		l.release(time.Now())
		if got := <-order; got != want {
			t.Fatalf("waiter %d started before waiter %d", got, want)
		}
	}
	l.release(time.Now())
}

func TestLimiterBlocksAtLimit(t *testing.T) {
	l := newLimiter(2, nil)
	l.acquire(nil)
	l.acquire(nil)
	stop := make(chan struct{})
	got := make(chan bool, 1)
	go func() { got <- l.acquire(stop) }()
	select {
	case <-got:
		t.Fatal("a third acquire passed a limit of 2")
	case <-time.After(50 * time.Millisecond):
	}
	l.release(time.Now())
	if !<-got {
		t.Fatal("acquire failed after a release")
	}
	go func() { got <- l.acquire(stop) }()
	close(stop)
	if <-got {
		t.Fatal("acquire passed after stop")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue) != 0 || l.active != 2 {
		t.Fatalf("a stopped waiter left %d queued, %d active (want 0, 2)", len(l.queue), l.active)
	}
}

// While pacing, waiters held back by the pace (not by the limit) are
// still started: each release or newcomer sees that the head waits out
// the delay.
func TestLimiterPacedWaitersProceed(t *testing.T) {
	l := newLimiter(2, nil)
	l.mu.Lock()
	l.setRateLocked(2000) // one start per 0.5ms
	l.peak = 4000
	l.mu.Unlock()
	var wg sync.WaitGroup
	var started atomic.Int64
	for range 4 {
		wg.Go(func() {
			for range 25 {
				if l.acquire(nil) {
					started.Add(1)
					l.release(time.Now())
				}
			}
		})
	}
	wg.Wait()
	if n := started.Load(); n != 100 {
		t.Fatalf("%d of 100 acquires started", n)
	}
}
