package lambdabatch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup"
)

// A function has no readiness probe: what it says of a store that is
// down or slow, it says in its log. The watch follows every store call
// of the function (through cappedStore) and says, naming the store, what
// it waits for and for how long: at the first call that fails for an
// outage, and while the outage lasts or a call goes unanswered, again at
// most storeLogEvery apart, however long the invocation.
const (
	// storeLogEvery is the longest gap between two lines about a store
	// that is down or slow, while an invocation waits on it.
	storeLogEvery = 30 * time.Second
	// watchEvery is how often the watch looks; a line is said again once
	// storeLogEvery-watchEvery has passed, so that no gap is longer.
	watchEvery = 5 * time.Second
	// slowAfter is how long a call may go unanswered before the watch
	// says so: a store that accepts connections and never answers fails
	// no call until its deadline (10 s for a record's calls).
	slowAfter = 5 * time.Second
)

// storeWatch is what the function knows of its store: the calls under
// way, and the outage under way, from the first record the store could
// not take (a consumer.StoreUnavailable outcome: the Guard's own sorting
// of the store's errors) to the first call the store answered.
type storeWatch struct {
	name   string // the store, as the lines name it
	prefix string // the handler package, as its lines begin
	log    *slog.Logger

	mu     sync.Mutex
	calls  map[*storeCall]struct{}
	outage outageEpisode
	// failed is the last call that failed, what the outage's lines say
	// the function waited for.
	failed struct {
		op     string
		waited time.Duration
	}
	said time.Time // when a line about the store was last said
}

// outageEpisode is one outage of the store.
type outageEpisode struct {
	since    time.Time
	failures int // records the store could not take
	op       string
	err      error
}

// storeCall is one call under way.
type storeCall struct {
	op    string
	since time.Time
}

func newStoreWatch(store dedup.Store, prefix string, log *slog.Logger) *storeWatch {
	return &storeWatch{name: storeName(store), prefix: prefix, log: log, calls: map[*storeCall]struct{}{}}
}

// storeName names the store in log lines: its String (a table, an
// address) when it has one, else its type.
func storeName(s dedup.Store) string {
	if n, ok := s.(fmt.Stringer); ok {
		return n.String()
	}
	return fmt.Sprintf("%T", s)
}

// begin reports a call op that starts now; end reports how it ended.
func (w *storeWatch) begin(op string) *storeCall {
	c := &storeCall{op: op, since: time.Now()}
	w.mu.Lock()
	w.calls[c] = struct{}{}
	w.mu.Unlock()
	return c
}

// end reports the store's answer to c (err nil), or the error c failed
// with: an answer ends the outage under way.
func (w *storeWatch) end(ctx context.Context, c *storeCall, err error) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.calls, c)
	if err != nil {
		w.failed.op, w.failed.waited = c.op, now.Sub(c.since)
		return
	}
	if o := w.outage; !o.since.IsZero() {
		w.outage = outageEpisode{}
		w.log.LogAttrs(ctx, slog.LevelInfo, w.prefix+": store reachable again", slog.String("store", w.name),
			slog.Duration("unavailable_for", now.Sub(o.since).Round(time.Millisecond)), slog.Int("records_given_back", o.failures))
	}
}

// unavailable reports n records the store could not take, for err (the
// outcome's, or the check's): said at once at the first of an outage,
// then as due.
func (w *storeWatch) unavailable(ctx context.Context, err error, n int) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	o := &w.outage
	if o.since.IsZero() {
		o.since = now.Add(-w.failed.waited)
	}
	first := o.failures == 0
	o.failures += n
	o.op, o.err = w.failed.op, err
	if o.op == "" {
		o.op = "a store call"
	}
	if !first && !w.due(now) {
		return
	}
	w.said = now
	w.log.LogAttrs(ctx, slog.LevelWarn, w.prefix+": store unavailable: its records come back to be delivered again, not failed",
		slog.String("store", w.name), slog.String("waiting_for", o.op), slog.Duration("waited", w.failed.waited.Round(time.Millisecond)),
		slog.Duration("unavailable_for", now.Sub(o.since).Round(time.Millisecond)), slog.Int("records_given_back", o.failures),
		slog.String("error", err.Error()))
}

// due says whether a line about the store may be said again at now.
func (w *storeWatch) due(now time.Time) bool {
	return w.said.IsZero() || now.Sub(w.said) >= storeLogEvery-watchEvery
}

// look says, at now, what the store has kept the function waiting for:
// the call unanswered longest, once it has waited slowAfter, or the
// outage under way.
func (w *storeWatch) look(ctx context.Context, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var oldest *storeCall
	for c := range w.calls {
		if oldest == nil || c.since.Before(oldest.since) {
			oldest = c
		}
	}
	o := &w.outage
	slow := oldest != nil && now.Sub(oldest.since) >= slowAfter
	if (!slow && o.since.IsZero()) || !w.due(now) {
		return
	}
	w.said = now
	attrs := []slog.Attr{slog.String("store", w.name), slog.Int("calls_under_way", len(w.calls))}
	if slow {
		attrs = append(attrs, slog.String("waiting_for", oldest.op), slog.Duration("waited", now.Sub(oldest.since).Round(time.Second)))
	} else {
		attrs = append(attrs, slog.String("waiting_for", o.op))
	}
	if !o.since.IsZero() {
		attrs = append(attrs, slog.Duration("unavailable_for", now.Sub(o.since).Round(time.Second)),
			slog.Int("records_given_back", o.failures), slog.String("error", o.err.Error()))
	}
	w.log.LogAttrs(ctx, slog.LevelWarn, w.prefix+": waiting for the store: calls unanswered or failing", attrs...)
}

// run looks every watchEvery until stop is closed, then closes done.
func (w *storeWatch) run(ctx context.Context, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			w.look(ctx, now)
		}
	}
}

// watching runs the watch for one invocation; the func it returns ends it.
func (w *storeWatch) watching(ctx context.Context) func() {
	stop, done := make(chan struct{}), make(chan struct{})
	go w.run(ctx, stop, done)
	return func() { close(stop); <-done }
}
