package consumer

import (
	"sync"
	"time"
)

// limiter adapts how many messages are processed at once to the store's
// throttling (AIMD): each throttle the store reports cuts the limit by a
// factor, at most once per cooldown so one burst counts once; each
// message finished without a recent throttle adds 1/limit, so the limit
// grows by about one per round of work. All workers share it, so they back
// off together instead of each on its own and returning in step.
type limiter struct {
	mu           sync.Mutex
	limit        float64
	min, max     float64
	active       int
	waiters      int // acquire calls waiting on wake
	lastDecrease time.Time
	cooldown     time.Duration
	wake         chan struct{}
	onChange     func(int)
}

const (
	limiterDecrease = 0.7
	limiterCooldown = 200 * time.Millisecond
)

func newLimiter(max int, onChange func(int)) *limiter {
	return &limiter{limit: float64(max), min: 1, max: float64(max), cooldown: limiterCooldown,
		wake: make(chan struct{}), onChange: onChange}
}

// Limit is the current limit.
func (l *limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.limit)
}

// acquire waits for room under the limit; false if stop closed first.
func (l *limiter) acquire(stop <-chan struct{}) bool {
	for {
		l.mu.Lock()
		if l.active < int(l.limit) {
			l.active++
			l.mu.Unlock()
			return true
		}
		wake := l.wake
		l.waiters++
		l.mu.Unlock()
		select {
		case <-wake:
		case <-stop:
			l.mu.Lock()
			l.waiters--
			l.mu.Unlock()
			return false
		}
		l.mu.Lock()
		l.waiters--
		l.mu.Unlock()
	}
}

func (l *limiter) release(now time.Time) {
	l.mu.Lock()
	l.active--
	before := int(l.limit)
	if now.Sub(l.lastDecrease) >= l.cooldown {
		l.limit = min(l.max, l.limit+1/l.limit)
	}
	l.signalLocked()
	after := int(l.limit)
	l.mu.Unlock()
	if after != before && l.onChange != nil {
		l.onChange(after)
	}
}

// throttled is told of a store throttle.
func (l *limiter) throttled(now time.Time) {
	l.mu.Lock()
	if now.Sub(l.lastDecrease) < l.cooldown {
		l.mu.Unlock()
		return
	}
	l.lastDecrease = now
	before := int(l.limit)
	l.limit = max(l.min, l.limit*limiterDecrease)
	after := int(l.limit)
	l.mu.Unlock()
	if after != before && l.onChange != nil {
		l.onChange(after)
	}
}

// signalLocked wakes the waiters; with none, it makes no new channel,
// which would otherwise cost an allocation per message.
func (l *limiter) signalLocked() {
	if l.waiters == 0 {
		return
	}
	close(l.wake)
	l.wake = make(chan struct{})
}
