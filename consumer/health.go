package consumer

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Health is a Consumer's readiness and liveness at one moment
// (Consumer.Health; HealthHandler serves it as JSON).
//
// Ready: Run passed its checks, the Source has answered a Receive (a Kafka
// source has joined its group: it joins at the first Receive, which
// returns once a partition it was assigned has a message) and its last
// Receive did not fail, the store's last call did not fail for an outage,
// no failure of the broker has lasted BrokerTimeout, and the run is not
// draining.
//
// Live: the run has not stopped and is not stalled. Stalled: messages are
// running (in a worker, between claim and commit) and no worker has
// finished a message, of any outcome, for StallTimeout. A store outage is
// not a stall: calls fail within their timeout and the messages are held
// (not ready, still live), as a restart would mend nothing.
type Health struct {
	Ready bool `json:"ready"`
	Live  bool `json:"live"`
	// State is where the run is: "new" (Run not called), "checking",
	// "waiting_for_source" (the first Receive has not returned),
	// "receiving", "draining" or "stopped".
	State          string `json:"state"`
	StoreReachable bool   `json:"store_reachable"`
	// StoreUnavailableSince is when the current store outage began (zero
	// while the store is reachable).
	StoreUnavailableSince time.Time `json:"store_unavailable_since,omitzero"`
	// WaitingForSourceSince is when the first Receive began, while it has
	// not returned.
	WaitingForSourceSince time.Time `json:"waiting_for_source_since,omitzero"`
	// SourceFailingSince is when Receive began to fail, while its calls
	// fail (and are retried).
	SourceFailingSince time.Time `json:"source_failing_since,omitzero"`
	// BrokerReachable is false once a failure of the broker has lasted
	// BrokerTimeout: unreachable, silent, or answering with errors, as
	// the Source reports it (broker.Runtime.Status).
	BrokerReachable bool `json:"broker_reachable"`
	// While the broker fails: its address, what the Source waits for from
	// it, since when, and its last error (a failure that has not yet
	// lasted BrokerTimeout shows here while the consumer is still ready).
	Broker             string    `json:"broker,omitempty"`
	BrokerWaitingFor   string    `json:"broker_waiting_for,omitempty"`
	BrokerFailingSince time.Time `json:"broker_failing_since,omitzero"`
	BrokerError        string    `json:"broker_error,omitempty"`
	Stalled            bool      `json:"stalled"`
	// InFlight is the messages held (received, not yet settled); Running
	// those of them in a worker now.
	InFlight int `json:"in_flight"`
	Running  int `json:"running"`
	// LastFinished is when a worker last finished a message.
	LastFinished time.Time `json:"last_finished,omitzero"`
	// Reasons says why the consumer is not ready or not live.
	Reasons []string `json:"reasons,omitempty"`
}

// The states of a run, as Health.State names them.
const (
	stateNew int32 = iota
	stateChecking
	stateWaitingForSource
	stateReceiving
	stateDraining
	stateStopped
)

var stateNames = [...]string{"new", "checking", "waiting_for_source", "receiving", "draining", "stopped"}

// defaultStallLeases is StallTimeout's default, in LeaseTTLs: a
// message's claim, handler and commit (retried through an outage while
// its lease holds) end within about one lease period.
const defaultStallLeases = 2

// stallAfter is StallTimeout, or its default.
func (c *config) stallAfter() time.Duration {
	if c.stallTimeout == 0 {
		return defaultStallLeases * c.leaseTTL
	}
	return c.stallTimeout
}

// checkHealth checks the options of health and progress.
func (c *config) checkHealth() error {
	if c.stallTimeout != 0 && c.stallTimeout < c.leaseTTL {
		return configError("StallTimeout %v: must be at least LeaseTTL %v, or a message that runs its full course would count as a stall",
			c.stallTimeout, c.leaseTTL)
	}
	return nil
}

// StallTimeout is how long messages may be running with none finished
// before the consumer counts as stalled and Health.Live turns false
// (default 2 × LeaseTTL, 2 minutes). It must be at least LeaseTTL: a
// message's handler, renewals and commit retries take up to that long.
func StallTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.stallTimeout = d })
}

// monitor is what a Consumer knows of its own health, and the log lines
// that say what it waits for while nothing else would (waits.go,
// progress.go). Its fast paths are atomics: the pool reports every
// message to it.
type monitor struct {
	cfg   *config
	state atomic.Int32
	pool  atomic.Pointer[pool]

	running atomic.Int64
	// lastFinish is when a worker last finished a message, or when
	// messages began to run after none did (Unix ns).
	lastFinish atomic.Int64

	sourceWaitSince atomic.Int64 // Unix ns; 0: not waiting
	// sourceFailingSince is when Receive began to fail (Unix ns; 0: its
	// last call did not).
	sourceFailingSince atomic.Int64

	// storeDownSince is when the current store outage began (Unix ns; 0:
	// reachable); the rest of the outage's state is under outageMu.
	storeDownSince atomic.Int64
	// storeCalls is the store calls under way; storeBusySince when they
	// last went from none to some, storeAnswered when one last ended
	// (Unix ns): calls under way and none ended for long is a store that
	// does not answer, before any call has failed for it.
	storeCalls     atomic.Int64
	storeBusySince atomic.Int64
	storeAnswered  atomic.Int64
	outageMu       sync.Mutex
	outage         outageEpisode

	// broker is what the Source reported of its broker.
	broker brokerState

	waits keyWaits

	// counts are the outcomes by action, while WithProgressLog is on.
	counts [numProgressCounts]atomic.Int64
}

func newMonitor(cfg *config) *monitor {
	return &monitor{cfg: cfg, waits: keyWaits{until: map[string]time.Time{}}}
}

func (m *monitor) setState(s int32) { m.state.Store(s) }

// finishGranularity bounds how often lastFinish is written: workers
// finishing messages at once would otherwise all write one cache line.
const finishGranularity = 10 * time.Millisecond

// begin reports a message that a worker starts.
func (m *monitor) begin() {
	if m.running.Add(1) == 1 {
		// Messages run after none did: a stall is counted from now.
		m.advance(time.Now().UnixNano())
	}
}

// finish reports a message a worker finished, of any outcome, at now.
func (m *monitor) finish(now time.Time) {
	m.running.Add(-1)
	if ns := now.UnixNano(); ns-m.lastFinish.Load() >= int64(finishGranularity) {
		m.advance(ns)
	}
}

// advance moves lastFinish on to ns, never back.
func (m *monitor) advance(ns int64) {
	for {
		old := m.lastFinish.Load()
		if old >= ns || m.lastFinish.CompareAndSwap(old, ns) {
			return
		}
	}
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// health is the Health at now.
func (m *monitor) health(now time.Time) Health {
	state := m.state.Load()
	h := Health{
		State:                 stateNames[state],
		StoreUnavailableSince: unixTime(m.storeDownSince.Load()),
		WaitingForSourceSince: unixTime(m.sourceWaitSince.Load()),
		SourceFailingSince:    unixTime(m.sourceFailingSince.Load()),
		Running:               int(m.running.Load()),
		LastFinished:          unixTime(m.lastFinish.Load()),
	}
	if h.StoreUnavailableSince.IsZero() {
		if since, ok := m.storeSilentSince(now); ok {
			h.StoreUnavailableSince = since
		}
	}
	h.StoreReachable = h.StoreUnavailableSince.IsZero()
	f, down := m.brokerDown(now)
	h.BrokerReachable = !down
	if !f.since.IsZero() {
		h.Broker, h.BrokerWaitingFor, h.BrokerFailingSince = f.broker, f.waiting, f.since
		h.BrokerError = errText(f.err)
	}
	if p := m.pool.Load(); p != nil {
		h.InFlight = int(p.held.Load())
	}
	h.Stalled = h.Running > 0 && now.Sub(h.LastFinished) > m.cfg.stallAfter()
	switch state {
	case stateNew:
		h.Reasons = append(h.Reasons, "Run has not been called")
	case stateChecking:
		h.Reasons = append(h.Reasons, "checking the store and the source")
	case stateWaitingForSource:
		h.Reasons = append(h.Reasons, "waiting for the source's first Receive (a Kafka group join, or no message yet)")
	case stateDraining:
		h.Reasons = append(h.Reasons, "draining")
	case stateStopped:
		h.Reasons = append(h.Reasons, "stopped")
	}
	if !h.SourceFailingSince.IsZero() {
		h.Reasons = append(h.Reasons, "the source's Receive failing since "+h.SourceFailingSince.UTC().Format(time.RFC3339))
	}
	if down {
		r := "broker " + f.broker + " failing for " + now.Sub(f.since).Round(time.Second).String() +
			" (waiting for " + f.waiting + ")"
		if f.err != nil {
			r += ": " + f.err.Error()
		}
		h.Reasons = append(h.Reasons, r)
	}
	if !h.StoreReachable {
		h.Reasons = append(h.Reasons, "store unavailable (calls failing or unanswered) since "+h.StoreUnavailableSince.UTC().Format(time.RFC3339))
	}
	if h.Stalled {
		h.Reasons = append(h.Reasons, "stalled: "+h.LastFinished.UTC().Format(time.RFC3339)+" was the last message finished, with messages running")
	}
	h.Ready = state == stateReceiving && h.StoreReachable && h.BrokerReachable && h.SourceFailingSince.IsZero()
	h.Live = state != stateStopped && !h.Stalled
	return h
}

// Health says whether c is ready and live; see Health. It is safe to call
// at any time, from any goroutine.
func (c *Consumer) Health() Health { return c.mon.health(time.Now()) }

// HealthHandler serves c's Health as JSON: a path ending in /readyz
// answers 200 when it is ready, /livez 200 when it is live, else 503 (any
// other path: 404). Mount it where the probes look, for example
// mux.Handle("/healthz/", c.HealthHandler()) for /healthz/readyz and
// /healthz/livez.
func (c *Consumer) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var probe func(Health) bool
		switch {
		case strings.HasSuffix(r.URL.Path, "/readyz"):
			probe = func(h Health) bool { return h.Ready }
		case strings.HasSuffix(r.URL.Path, "/livez"):
			probe = func(h Health) bool { return h.Live }
		default:
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := c.Health()
		code := http.StatusOK
		if !probe(h) {
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		if r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(h)
		}
	})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
