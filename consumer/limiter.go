package consumer

import (
	"math"
	"slices"
	"sync"
	"time"
)

// limiter adapts how many messages are processed at once to the store's
// throttling (AIMD): each throttle the store reports cuts the limit by a
// factor, at most once per cooldown so one burst counts once; each
// message finished with no throttle in the last cooldown adds 1/limit, so
// the limit grows by about one per round of work. A throttle that does not
// cut (within the cooldown) still holds growth off: under steady
// throttling the limit only falls. All workers share it, so they back
// off together instead of each on its own and returning in step.
//
// A capacity ceiling is a rate: when one message at a time still draws
// throttles (a fast store under a low ceiling), the limit cannot fall
// further, so the limiter paces starts instead, on the start rate: each
// throttle cuts it by paceDecrease, never below paceFloor of the rate it
// began from; each start without a recent throttle
// raises it, fast (paceFast per second) while below nine tenths of the
// rate of the last throttle, slowly (paceSlow) from there, so it dwells
// near the ceiling rather than overshooting it. Pacing ends once it no
// longer binds: many starts in a row came at under half its pace.
//
// Waiters are served in arrival order, so no message starves behind later
// ones while the limit is low.
//
// Every start and every end takes the one lock. A lock-free path while
// nothing constrained the limit was cheaper alone but showed nothing in
// the memory pipeline (BenchmarkMemoryPipeline), so the simpler lock
// stayed; the figures are in BENCHMARKS.md.
type limiter struct {
	mu           sync.Mutex
	active       int     // messages started and not released
	limit        float64 // between 1 and max
	max          float64
	lastDecrease time.Time
	lastThrottle time.Time // any throttle, cut for or not: no increase soon after
	queue        []*limitWaiter
	onChange     func(int)

	// pacing; interval 0 is off
	interval  time.Duration // least time between two starts, 1/rate
	rate      float64       // starts per second allowed
	peak      float64       // the rate at the last paced throttle
	floor     float64       // the least rate: paceFloor of where pacing began
	next      time.Time     // earliest next start while pacing
	lastStart time.Time
	gap       time.Duration // moving average of the time between starts
	slack     int           // starts in a row at under half the pace
}

type limitWaiter struct {
	ready   chan struct{} // closed when granted
	nudge   chan struct{} // this waiter became the head of the queue
	granted bool
}

const (
	limiterDecrease = 0.7
	limiterCooldown = 200 * time.Millisecond
	// paceDecrease is gentler than limiterDecrease: under a rate ceiling the
	// rate's sawtooth runs between paceDecrease and 1 of it, so its mean
	// stays near the ceiling.
	paceDecrease = 0.8
	paceFast     = 0.5 // rate growth per second, well below the last peak
	paceSlow     = 0.1 // rate growth per second, near or above it
	// paceFloor bounds how far pacing may slow starts, as a share of the
	// one-at-a-time rate it began from: throttles that come whatever the
	// rate (a hot partition, injected faults) must not starve the consumer;
	// per-call backoff still spaces what is throttled below it.
	paceFloor = 0.25
	// paceSlackStarts starts in a row at under half the pace end pacing.
	paceSlackStarts = 20
)

func newLimiter(max int, onChange func(int)) *limiter {
	return &limiter{limit: float64(max), max: float64(max), onChange: onChange}
}

// acquire waits for room under the limit, in arrival order; false if stop
// closed first.
func (l *limiter) acquire(stop <-chan struct{}) bool {
	l.mu.Lock()
	// Room now and no one waiting: start without queueing (no allocation
	// on the unthrottled path).
	if now := time.Now(); len(l.queue) == 0 && l.active < int(l.limit) && (l.interval == 0 || !now.Before(l.next)) {
		l.active++
		l.startedLocked(now)
		l.mu.Unlock()
		return true
	}
	w := &limitWaiter{ready: make(chan struct{}), nudge: make(chan struct{}, 1)}
	l.queue = append(l.queue, w)
	wait := l.grantLocked(time.Now())
	if len(l.queue) > 0 && l.queue[0] != w {
		l.kickLocked(wait)
		wait = 0
	}
	l.mu.Unlock()
	for {
		var tick <-chan time.Time
		if wait > 0 {
			tick = time.After(wait) // paced: at most one start per wait
		}
		select {
		case <-w.ready:
			return true
		case <-tick:
		case <-w.nudge:
		case <-stop:
			l.mu.Lock()
			if w.granted {
				// Granted as stop closed: hand the room on.
				l.active--
			} else {
				l.removeLocked(w)
			}
			l.kickLocked(l.grantLocked(time.Now()))
			l.mu.Unlock()
			return false
		}
		l.mu.Lock()
		wait = 0
		if len(l.queue) > 0 && l.queue[0] == w {
			wait = l.grantLocked(time.Now())
		}
		l.mu.Unlock()
	}
}

// grantLocked starts waiters from the head of the queue while there is
// room, and returns how long until pacing lets the head start (0 if it
// need not wait for time).
func (l *limiter) grantLocked(now time.Time) time.Duration {
	for len(l.queue) > 0 && l.active < int(l.limit) {
		if l.interval > 0 && now.Before(l.next) {
			return l.next.Sub(now)
		}
		w := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		l.active++
		w.granted = true
		close(w.ready)
		l.startedLocked(now)
		l.nudgeHeadLocked()
	}
	return 0
}

// kickLocked tells the head of the queue to wait out a pacing delay, when
// the grant was tried by someone else (a release, a throttle, a newcomer).
func (l *limiter) kickLocked(wait time.Duration) {
	if wait > 0 {
		l.nudgeHeadLocked()
	}
}

// nudgeHeadLocked tells the head of the queue to look again.
func (l *limiter) nudgeHeadLocked() {
	if len(l.queue) > 0 {
		select {
		case l.queue[0].nudge <- struct{}{}:
		default:
		}
	}
}

func (l *limiter) removeLocked(w *limitWaiter) {
	if i := slices.Index(l.queue, w); i >= 0 {
		l.queue = slices.Delete(l.queue, i, i+1)
		if i == 0 {
			l.nudgeHeadLocked()
		}
	}
}

// startedLocked records a start: the spacing average, and while pacing
// the next start's earliest time and the rate's additive increase.
func (l *limiter) startedLocked(now time.Time) {
	var since time.Duration
	if !l.lastStart.IsZero() {
		since = min(max(now.Sub(l.lastStart), 0), limiterCooldown)
		if l.gap == 0 {
			l.gap = since
		} else {
			l.gap = (9*l.gap + since) / 10
		}
	}
	l.lastStart = now
	if l.interval == 0 {
		return
	}
	if now.Sub(l.lastThrottle) >= limiterCooldown {
		growth := paceSlow
		if l.rate < 0.9*l.peak {
			growth = paceFast
		}
		l.setRateLocked(l.rate * (1 + growth*since.Seconds()))
	}
	// Starts coming at under half the pace, many in a row: the limit or
	// the load binds, not the pace, so it is no longer needed.
	if since > 2*l.interval {
		l.slack++
	} else {
		l.slack = 0
	}
	if l.slack >= paceSlackStarts {
		l.interval, l.slack = 0, 0
		return
	}
	l.next = now.Add(l.interval)
}

func (l *limiter) setRateLocked(rate float64) {
	l.rate = rate
	l.interval = max(time.Duration(float64(time.Second)/rate), 1)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (l *limiter) release(now time.Time) {
	l.mu.Lock()
	l.active--
	before := int(l.limit)
	if now.Sub(l.lastThrottle) >= limiterCooldown {
		l.limit = min(l.max, l.limit+1/l.limit)
	}
	l.kickLocked(l.grantLocked(now))
	l.unlockNotify(before)
}

// unlockNotify unlocks and reports a limit changed from before.
func (l *limiter) unlockNotify(before int) {
	after := int(l.limit)
	l.mu.Unlock()
	if after != before && l.onChange != nil {
		l.onChange(after)
	}
}

// throttled is told of a store throttle.
func (l *limiter) throttled(now time.Time) {
	l.mu.Lock()
	l.lastThrottle = later(l.lastThrottle, now)
	if now.Sub(l.lastDecrease) < limiterCooldown {
		l.mu.Unlock()
		return
	}
	l.lastDecrease = now
	before := int(l.limit)
	switch {
	case l.interval > 0:
		l.peak = l.rate
		l.setRateLocked(max(l.floor, l.rate*paceDecrease))
		l.next = later(l.next, now.Add(l.interval))
	case l.limit <= 1:
		// One at a time is still too many: pace from the rate seen, with
		// no peak known yet.
		gap := l.gap
		if gap <= 0 {
			gap = time.Millisecond
		}
		l.peak = math.Inf(1)
		l.floor = paceFloor / gap.Seconds()
		l.setRateLocked(paceDecrease / gap.Seconds())
		l.next = now.Add(l.interval)
	default:
		l.limit = max(1, l.limit*limiterDecrease)
	}
	l.unlockNotify(before)
}
