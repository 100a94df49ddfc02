package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// The lines a consumer logs while it waits, so that no wait is silent:
// for the source's first Receive, behind another worker's lease, and
// through a store outage. Each is said once per episode, and again only
// at a bounded rate while the episode lasts.

// Source waits: the first line comes after sourceWaitFirst, the next ones
// twice as far apart each time, up to sourceWaitMax.
const (
	sourceWaitFirst = 10 * time.Second
	sourceWaitMax   = 5 * time.Minute
)

// outageLogEvery is how often a store outage is said again while it
// lasts.
const outageLogEvery = 30 * time.Second

// keyWaitsPrune is the count of key waits remembered above which those
// whose lease has ended are forgotten.
const keyWaitsPrune = 1024

// sourceName names the Source in log lines: its String, or its type.
func sourceName(src Source) string {
	if s, ok := src.(safeSource); ok {
		src = s.s
	}
	if s, ok := src.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", src)
}

// sourceWait logs while the first Receive has not returned; its owner,
// the receive loop, ends it with answered or stop.
type sourceWait struct {
	m       *monitor
	source  string
	start   time.Time
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

// awaitSource begins the wait for the first Receive of src.
func (m *monitor) awaitSource(src string) *sourceWait {
	w := &sourceWait{m: m, source: src, start: time.Now(), done: make(chan struct{}), stopped: make(chan struct{})}
	m.sourceWaitSince.Store(w.start.UnixNano())
	m.setState(stateWaitingForSource)
	go w.run()
	return w
}

func (w *sourceWait) run() {
	defer close(w.stopped)
	every := sourceWaitFirst
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		w.m.cfg.logger.Info("waiting for the source: its first Receive has not returned (a Kafka source joins its group here, and returns once an assigned partition has a message)",
			slog.String("source", w.source), slog.Duration("waited", time.Since(w.start).Round(time.Second)))
		every = min(2*every, sourceWaitMax)
		t.Reset(every)
	}
}

// answered ends the wait: the source returned from Receive.
func (w *sourceWait) answered() {
	w.once.Do(func() {
		w.end()
		w.m.setState(stateReceiving)
		w.m.cfg.logger.Info("receiving from the source", slog.String("source", w.source),
			slog.Duration("waited", time.Since(w.start)))
	})
}

// stop ends the wait, answered or not.
func (w *sourceWait) stop() { w.once.Do(w.end) }

func (w *sourceWait) end() {
	close(w.done)
	<-w.stopped
	w.m.sourceWaitSince.Store(0)
}

// keyWait logs a message m whose key k another worker holds, its lease
// claimable after until (Outcome.RetryAfter), once per lease of the
// holder: a message rechecked in place, or its copies, say nothing more
// until that lease has ended. heldInPlace says whether m waits here or is
// given back to the source.
func (m *monitor) keyWait(ctx context.Context, msg *Message, o Outcome, ordered, heldInPlace bool, now time.Time) {
	key, until := o.IdempotencyKey, now.Add(o.RetryAfter)
	m.waitsMu.Lock()
	if logged, ok := m.waits[key]; ok && now.Before(logged) {
		m.waitsMu.Unlock()
		return
	}
	if len(m.waits) >= keyWaitsPrune {
		for k, t := range m.waits {
			if !now.Before(t) {
				delete(m.waits, k)
			}
		}
	}
	m.waits[key] = until
	m.waitsMu.Unlock()
	attrs := []slog.Attr{slogKey(key), slogID(msg), slog.Duration("lease_ends_in", o.RetryAfter),
		slog.Bool("held_in_place", heldInPlace)}
	if ordered {
		// Its successors wait behind it.
		attrs = append(attrs, slog.String("destination", msg.Origin.Destination), slog.Int("partition", int(msg.Origin.Partition)))
	}
	m.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "waiting behind another worker's lease on the key", attrs...)
}

// outageEpisode is one store outage, from the first store call that
// failed for it to the first that did not.
type outageEpisode struct {
	since    time.Time
	failures int
	logged   time.Time // when it was last said (zero: not yet)
}

// storeCalled reports a store call's result at now: the outage it began
// or ended.
func (m *monitor) storeCalled(err error, now time.Time) {
	if err == nil || faultOf(err) != outage {
		// The store answered.
		if m.storeDownSince.Load() == 0 {
			return
		}
		m.outageMu.Lock()
		defer m.outageMu.Unlock()
		o := m.outage
		if o.since.IsZero() {
			return
		}
		m.outage = outageEpisode{}
		m.storeDownSince.Store(0)
		if !o.logged.IsZero() {
			m.cfg.logger.Info("store reachable again", slog.Duration("unavailable_for", now.Sub(o.since)),
				slog.Int("failed_calls", o.failures))
		}
		return
	}
	m.outageMu.Lock()
	defer m.outageMu.Unlock()
	if m.outage.since.IsZero() {
		m.outage.since = now
		m.storeDownSince.Store(now.UnixNano())
	}
	m.outage.failures++
}

// storeRetry reports a retry after retryIn, at now, for an outage whose
// last error is err: said at the first retry of the outage, then at most
// every outageLogEvery.
func (m *monitor) storeRetry(ctx context.Context, err error, retryIn time.Duration, now time.Time) {
	m.outageMu.Lock()
	defer m.outageMu.Unlock()
	o := &m.outage
	if o.since.IsZero() || (!o.logged.IsZero() && now.Sub(o.logged) < outageLogEvery) {
		return // reachable again meanwhile, or said lately
	}
	o.logged = now
	m.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "store unavailable: messages are held, not failed, and retried",
		slogErr(err), slog.Duration("unavailable_for", now.Sub(o.since)), slog.Int("failed_calls", o.failures),
		slog.Time("next_retry", now.Add(retryIn)), slog.Duration("retry_in", retryIn))
}
