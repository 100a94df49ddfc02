package consumer

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/broker"
)

// DefaultBrokerTimeout is BrokerTimeout's default.
const DefaultBrokerTimeout = 30 * time.Second

// BrokerTimeout is how long the Source's broker may fail before the
// consumer stops being ready (default DefaultBrokerTimeout): unreachable,
// not answering, or answering with errors, as the Source reports it
// (broker.Runtime.Status). Readiness comes back at the broker's next
// answer, or when messages are received again. Shorter failures, such as
// a rebalance or a leader moving, leave the consumer ready. It must be
// positive.
func BrokerTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.brokerTimeout = d })
}

// The watcher's rhythm: it looks every watchEvery, says a failure first
// once it has lasted waitLogAfter, and says it again once dependLogEvery
// has passed since it was last said, so that no two lines about a
// dependency that is down are more than outageLogEvery apart.
const (
	watchEvery     = 5 * time.Second
	waitLogAfter   = 10 * time.Second
	dependLogEvery = outageLogEvery - watchEvery
)

// brokerFailure is one failure of the broker, as the Source reported it:
// from its first failed report of a Waiting to the answer that ends it.
type brokerFailure struct {
	waiting  string
	broker   string
	since    time.Time
	last     time.Time
	err      error
	failures int
	logged   time.Time // when it was last said (zero: not yet)
}

// brokerState is what the Source reported of its broker: the failures
// under way, by what the Source waited for. Its fast path, an answer
// while nothing fails, reads one atomic.
type brokerState struct {
	failing atomic.Int32
	mu      sync.Mutex
	byWait  map[string]*brokerFailure
}

// brokerStatus is broker.Runtime.Status: a report of the Source at now.
func (m *monitor) brokerStatus(s broker.Status, now time.Time) {
	b := &m.broker
	if s.Err == nil && b.failing.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.byWait[s.Waiting]
	if s.Err == nil {
		if f != nil {
			delete(b.byWait, s.Waiting)
			b.failing.Add(-1)
			m.brokerBack(f, s.Broker, now)
		}
		return
	}
	if f == nil {
		if b.byWait == nil {
			b.byWait = map[string]*brokerFailure{}
		}
		f = &brokerFailure{waiting: s.Waiting, since: now}
		b.byWait[s.Waiting] = f
		b.failing.Add(1)
	}
	f.broker, f.last, f.err = s.Broker, now, s.Err
	f.failures++
}

// brokerFlowing reports messages received at now: whatever the Source
// said of its broker, it delivers, so every failure ends.
func (m *monitor) brokerFlowing(now time.Time) {
	b := &m.broker
	if b.failing.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for w, f := range b.byWait {
		delete(b.byWait, w)
		b.failing.Add(-1)
		m.brokerBack(f, f.broker, now)
	}
}

// brokerBack says that failure f ended, if it was said to have begun.
func (m *monitor) brokerBack(f *brokerFailure, addr string, now time.Time) {
	if f.logged.IsZero() {
		return
	}
	if addr == "" {
		addr = f.broker
	}
	m.cfg.logger.Info("broker answering again", slog.String("broker", addr), slog.String("waiting_for", f.waiting),
		slog.Duration("failed_for", now.Sub(f.since).Round(time.Millisecond)), slog.Int("failed_calls", f.failures))
}

// brokerDown is the broker's failure that has lasted longest, and whether
// it has lasted BrokerTimeout at now.
func (m *monitor) brokerDown(now time.Time) (brokerFailure, bool) {
	b := &m.broker
	if b.failing.Load() == 0 {
		return brokerFailure{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var worst *brokerFailure
	for _, f := range b.byWait {
		if worst == nil || f.since.Before(worst.since) {
			worst = f
		}
	}
	if worst == nil {
		return brokerFailure{}, false
	}
	return *worst, now.Sub(worst.since) >= m.cfg.brokerTimeout
}

// watch says, until stop is closed, what the consumer waits for while a
// dependency fails: the broker's failures (which nothing else would say,
// as the Source retries them itself) and a store outage (also said at a
// retry, which an idle consumer makes none of), then closes done.
func (m *monitor) watch(ctx context.Context, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now()
		m.sayBroker(ctx, now)
		m.sayOutage(ctx, now)
	}
}

// sayBroker logs each broker failure that has lasted waitLogAfter and was
// not said for dependLogEvery.
func (m *monitor) sayBroker(ctx context.Context, now time.Time) {
	b := &m.broker
	if b.failing.Load() == 0 {
		return
	}
	b.mu.Lock()
	var due []brokerFailure
	for _, f := range b.byWait {
		if now.Sub(f.since) >= waitLogAfter && (f.logged.IsZero() || now.Sub(f.logged) >= dependLogEvery) {
			f.logged = now
			due = append(due, *f)
		}
	}
	b.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].since.Before(due[j].since) })
	for _, f := range due {
		m.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "waiting for the broker: the source retries it",
			slog.String("broker", f.broker), slog.String("waiting_for", f.waiting),
			slog.Duration("failing_for", now.Sub(f.since).Round(time.Second)), slog.Int("failed_calls", f.failures),
			slogErr(f.err), slog.Bool("ready", now.Sub(f.since) < m.cfg.brokerTimeout))
	}
}

// sayOutage logs a store outage not said for dependLogEvery.
func (m *monitor) sayOutage(ctx context.Context, now time.Time) {
	if m.storeDownSince.Load() == 0 {
		return
	}
	m.outageMu.Lock()
	defer m.outageMu.Unlock()
	o := &m.outage
	if o.since.IsZero() || (!o.logged.IsZero() && now.Sub(o.logged) < dependLogEvery) {
		return
	}
	o.logged = now
	m.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "store unavailable: messages are held, not failed, and retried",
		slogErr(o.err), slog.Duration("unavailable_for", now.Sub(o.since).Round(time.Second)), slog.Int("failed_calls", o.failures))
}

// dependencyDown names the dependency that is down now, for a stop to cut
// its drain short: the store in an outage, or the broker failing (for any
// time: a stop does not wait for BrokerTimeout). Empty when none is.
func (m *monitor) dependencyDown() string {
	if since := m.storeDownSince.Load(); since != 0 {
		return "the store, unavailable since " + unixTime(since).UTC().Format(time.RFC3339)
	}
	if d := m.storeUnanswered(time.Now()); d >= stopGrace {
		return "the store, its calls unanswered for " + d.Round(time.Second).String()
	}
	if f, _ := m.brokerDown(time.Now()); !f.since.IsZero() {
		return "the broker " + f.broker + ", failing since " + f.since.UTC().Format(time.RFC3339) + " (waiting for " + f.waiting + ")"
	}
	return ""
}

// storeSilentAfter is how long store calls may be under way with none
// answered before the store counts as unavailable: a store that accepts
// connections and never answers fails no call until its deadline
// (settleTimeout).
const storeSilentAfter = 5 * time.Second

func (m *monitor) storeCallBegins(now time.Time) {
	if m.storeCalls.Add(1) == 1 {
		m.storeBusySince.Store(now.UnixNano())
	}
}

func (m *monitor) storeCallEnds(now time.Time) {
	if ns := now.UnixNano(); ns-m.storeAnswered.Load() >= int64(finishGranularity) {
		m.storeAnswered.Store(ns)
	}
	m.storeCalls.Add(-1)
}

// storeUnanswered is how long, at now, store calls have been under way
// with none answered; zero when none is under way.
func (m *monitor) storeUnanswered(now time.Time) time.Duration {
	if m.storeCalls.Load() <= 0 {
		return 0
	}
	since := max(m.storeBusySince.Load(), m.storeAnswered.Load())
	return max(now.Sub(time.Unix(0, since)), 0)
}

// storeSilentSince is since when the store has not answered, once that
// has lasted storeSilentAfter.
func (m *monitor) storeSilentSince(now time.Time) (time.Time, bool) {
	d := m.storeUnanswered(now)
	if d < storeSilentAfter {
		return time.Time{}, false
	}
	return now.Add(-d), true
}
