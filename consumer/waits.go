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
// twice as far apart each time, up to sourceWaitMax: a group join the
// broker holds is a dependency being slow, said at least every 30s like
// the others.
const (
	sourceWaitFirst = 10 * time.Second
	sourceWaitMax   = 30 * time.Second
)

// outageLogEvery is how often a store outage is said again while it
// lasts.
const outageLogEvery = 30 * time.Second

// Key waits: at most keyWaitBurst lines per keyWaitWindow, however many
// keys wait (after a crash every key the dead worker held does); the next
// line logged counts those left unsaid.
const (
	keyWaitBurst  = 10
	keyWaitWindow = 10 * time.Second
)

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

// received reports a Receive that returned messages (or none) without
// error: the first ends the wait.
func (w *sourceWait) received() {
	if w.m.sourceFailingSince.Load() != 0 {
		w.m.sourceFailingSince.Store(0)
	}
	w.once.Do(func() {
		w.end()
		w.m.setState(stateReceiving)
		w.m.cfg.logger.Info("receiving from the source", slog.String("source", w.source),
			slog.Duration("waited", time.Since(w.start)))
	})
}

// failed reports a Receive that failed at now, to be retried.
func (w *sourceWait) failed(now time.Time) {
	w.m.sourceFailingSince.CompareAndSwap(0, now.UnixNano())
}

// stop ends the wait, answered or not.
func (w *sourceWait) stop() { w.once.Do(w.end) }

func (w *sourceWait) end() {
	close(w.done)
	<-w.stopped
	w.m.sourceWaitSince.Store(0)
}

// keyWaits remembers the keys whose wait was said, and bounds the lines.
type keyWaits struct {
	mu       sync.Mutex
	until    map[string]time.Time // key → when its holder's lease ends, as said
	window   time.Time            // when the current window of lines began
	lines    int                  // lines in the current window
	unlogged int                  // waits not said since the last line
}

// keyWait logs a message msg whose key another worker holds (o, its
// outcome, at now; o.RetryAfter is until the lease can be taken over),
// once per lease of the holder: the message rechecked in place, or its
// copies, say nothing more until that lease has ended. heldInPlace says
// whether msg waits here or is given back to the source.
func (m *monitor) keyWait(ctx context.Context, msg *Message, o Outcome, ordered, heldInPlace bool, now time.Time) {
	w := &m.waits
	key := o.IdempotencyKey
	w.mu.Lock()
	if until, ok := w.until[key]; ok && now.Before(until) {
		w.mu.Unlock()
		return
	}
	if now.Sub(w.window) >= keyWaitWindow {
		w.window, w.lines = now, 0
		for k, until := range w.until { // once a window: leases that ended
			if !now.Before(until) {
				delete(w.until, k)
			}
		}
	}
	w.until[key] = now.Add(o.RetryAfter)
	if w.lines >= keyWaitBurst {
		w.unlogged++
		w.mu.Unlock()
		return
	}
	w.lines++
	unlogged := w.unlogged
	w.unlogged = 0
	w.mu.Unlock()
	attrs := []slog.Attr{slogKey(key), slogID(msg), slog.Duration("lease_ends_in", o.RetryAfter),
		slog.Bool("held_in_place", heldInPlace)}
	if ordered {
		// Its successors wait behind it.
		attrs = append(attrs, slog.String("destination", msg.Origin.Destination), slog.Int("partition", int(msg.Origin.Partition)))
	}
	if unlogged > 0 {
		attrs = append(attrs, slog.Int("unlogged_waits", unlogged))
	}
	m.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "waiting behind another worker's lease on the key", attrs...)
}

// outageEpisode is one store outage, from the first store call that
// failed for it to the first that did not.
type outageEpisode struct {
	since    time.Time
	failures int
	err      error     // the last call's
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
	m.outage.err = err
}

// storeRetry reports a retry after retryIn, at now, for an outage whose
// last error is err: said at the first retry of the outage, then at most
// every dependLogEvery (the watcher says it too, when no retry does).
func (m *monitor) storeRetry(ctx context.Context, err error, retryIn time.Duration, now time.Time) {
	m.outageMu.Lock()
	defer m.outageMu.Unlock()
	o := &m.outage
	if o.since.IsZero() || (!o.logged.IsZero() && now.Sub(o.logged) < dependLogEvery) {
		return // reachable again meanwhile, or said lately
	}
	o.logged = now
	m.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "store unavailable: messages are held, not failed, and retried",
		slogErr(err), slog.Duration("unavailable_for", now.Sub(o.since)), slog.Int("failed_calls", o.failures),
		slog.Time("next_retry", now.Add(retryIn)), slog.Duration("retry_in", retryIn))
}
