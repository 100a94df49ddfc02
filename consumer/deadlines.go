package consumer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// sharedDeadlines hands out contexts with a deadline, shared by the calls
// begun within one window. A context handed out at t has its deadline
// between t+after-window and t+after. The pool has one for its store calls
// and settles, and each worker one for its handlers (handlerContext).
//
// A context of its own per call costs a context, a timer and two closures,
// and a message in the memory pipeline takes three (claim, complete, ack):
// sharing them takes those allocations off every message.
// BenchmarkSettleDeadlines sets the two side by side; its figures are in
// BENCHMARKS.md.
type sharedDeadlines struct {
	parent        context.Context // set once, before any worker starts
	window, after time.Duration
	cur           atomic.Pointer[sharedDeadline]
	mu            sync.Mutex
	live          []*sharedDeadline // not yet past their deadline
}

type sharedDeadline struct {
	ctx      context.Context
	cancel   context.CancelFunc
	until    time.Time // handed out before then
	deadline time.Time
}

func (s *sharedDeadlines) get(now time.Time) context.Context {
	if c := s.cur.Load(); c != nil && now.Before(c.until) {
		return c.ctx
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cur.Load(); c != nil && now.Before(c.until) {
		return c.ctx
	}
	kept := s.live[:0]
	for _, c := range s.live {
		if now.Before(c.deadline) {
			kept = append(kept, c)
		} else {
			c.cancel() // past its deadline: only releases it
		}
	}
	clear(s.live[len(kept):])
	s.live = kept
	c := &sharedDeadline{until: now.Add(s.window), deadline: now.Add(s.after)}
	c.ctx, c.cancel = context.WithDeadline(s.parent, c.deadline)
	s.live = append(s.live, c)
	s.cur.Store(c)
	return c.ctx
}

// stop releases the contexts once no call can be using them.
func (s *sharedDeadlines) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.live {
		c.cancel()
	}
	s.live = nil
	s.cur.Store(nil)
}
