package consumer

import (
	"log/slog"
	"time"
)

// WithProgressLog logs a progress line at INFO every interval while Run
// receives: the messages processed, answered as duplicates, dead-lettered
// and to be run again (retried, held through an outage, or waiting behind
// another worker's lease) in that interval, and the messages in flight.
// Off by default; an interval of zero or less leaves it off.
func WithProgressLog(interval time.Duration) Option {
	return optionFunc(func(c *config) { c.progressEvery = max(interval, 0) })
}

// The progress counts, by what became of a message.
const (
	countProcessed = iota
	countDuplicate
	countDeadLettered
	countRetried
	numProgressCounts
)

// counted counts o for the progress line, while it is on.
func (m *monitor) counted(o Outcome) {
	if m.cfg.progressEvery <= 0 {
		return
	}
	i := countRetried
	switch o.Action() {
	case Ack:
		i = countProcessed
		if o.Kind == Duplicate {
			i = countDuplicate
		}
	case DeadLetter:
		i = countDeadLettered
	}
	m.counts[i].Add(1)
}

// logProgress logs a progress line every WithProgressLog interval until
// stop is closed, then closes done.
func (m *monitor) logProgress(r *pool, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	every := m.cfg.progressEvery
	if every <= 0 {
		<-stop
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		var n [numProgressCounts]int64
		for i := range n {
			n[i] = m.counts[i].Swap(0)
		}
		m.cfg.logger.LogAttrs(r.handlerCtx, slog.LevelInfo, "progress",
			slog.Duration("interval", every),
			slog.Int64("processed", n[countProcessed]),
			slog.Int64("duplicates", n[countDuplicate]),
			slog.Int64("dead_lettered", n[countDeadLettered]),
			slog.Int64("retried", n[countRetried]),
			slog.Int64("in_flight", r.held.Load()))
	}
}
