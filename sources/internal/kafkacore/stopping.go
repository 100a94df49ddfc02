package kafkacore

import (
	"context"
	"log/slog"
	"sync"
)

// Stopping follows a source's stop for its Close: first the final
// commit's outcome, then the end of the shutdown.
type Stopping struct {
	final     chan struct{} // closed once the final commit's outcome is known
	done      chan struct{} // closed once the shutdown has finished
	finalOnce sync.Once
	mu        sync.Mutex
	err       error // the final commit's; under mu
}

// NewStopping returns a Stopping of a source not stopped yet.
func NewStopping() *Stopping {
	return &Stopping{final: make(chan struct{}), done: make(chan struct{})}
}

// Final records the final commit's outcome: err, nil when it was made or
// there was none to make. Only the first call counts.
func (s *Stopping) Final(err error) {
	s.finalOnce.Do(func() {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.final)
	})
}

// Done marks the shutdown finished; call it once, after Final.
func (s *Stopping) Done() { close(s.done) }

// Wait is the end of both sources' Close: it waits for the shutdown and
// returns the final commit's error. If ctx ends first, the shutdown goes
// on in the background and Wait returns ctx's error, unless only the
// leave was left (the final commit's outcome is known): a rebalance under
// way holds a leave up until the group answers, and a stop whose commit is
// made is not failed by what the group does meanwhile; that is logged, as
// pkg's, for group.
func (s *Stopping) Wait(ctx context.Context, pkg, group string, logger *slog.Logger) error {
	select {
	case <-s.done:
	case <-ctx.Done():
		select {
		case <-s.final:
			logger.Warn(pkg+": leaving the group goes on after Close returned: the group is rebalancing",
				"group", group, "error", ctx.Err().Error())
		default:
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
