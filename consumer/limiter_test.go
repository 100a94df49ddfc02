package consumer

import (
	"testing"
	"time"
)

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
	for range 20 {
		l.throttled(now.Add(time.Hour))
		now = now.Add(time.Hour)
	}
	if got := l.Limit(); got != 1 {
		t.Fatalf("the limit fell to %d, want the floor 1", got)
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
}
