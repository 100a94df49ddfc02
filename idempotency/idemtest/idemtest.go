package idemtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/idempotency"
	"github.com/onceq/onceq/idempotency/httpidem"
	"github.com/onceq/onceq/retry"
)

// Options tune the suite to a Store.
type Options struct {
	// Effect, when set, gives business writes of the Store's own type
	// over st (the Store newStore made for the case), and reads back
	// what they did: the suite's handler hands one over per run, and the
	// suite checks that it commits with the stored response, once. A
	// Store that commits no business writes (Redis) leaves it nil; the
	// suite then counts the handler's runs only.
	Effect func(t *testing.T, st dedup.Store) Effect
}

// Effect is a Store's business write for the suite.
type Effect struct {
	// Write returns a write that counts one application for id.
	Write func(id string) dedup.Write
	// Count reads how many times the writes for id were applied.
	Count func(t *testing.T, id string) int
}

// Run runs every case, each on a Store of its own from newStore.
func Run(t *testing.T, newStore func(t *testing.T) dedup.Store, opts ...Options) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s := &suite{opts: o, newStore: newStore}
	for _, c := range []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"MissingKeyIs400", s.missingKey},
		{"ReplaysStoredSuccess", s.replaysSuccess},
		{"ReplaysStoredClientError", s.replaysClientError},
		{"ServerErrorNotStored", s.serverErrorNotStored},
		{"ServerErrorStoredByOption", s.serverErrorStored},
		{"RetryInFlightIs409", s.inFlight409},
		{"RetryInFlightWaits", s.inFlightWaits},
		{"KeyReusedIs422", s.keyReuse},
		{"QueryIsFingerprinted", s.queryFingerprinted},
		{"KeysScopedToCaller", s.scopedToCaller},
		{"KeySyntax", s.keySyntax},
		{"KeyCharactersKeptApart", s.keyCharacters},
		{"OversizeResponseRunsOnce", s.oversizeResponse},
		{"FiftyConcurrentRetriesRunOnce", s.fiftyRetries},
		{"StoreOutageIs503", s.outage},
		{"AbandonedRequestNotStored", s.abandoned},
	} {
		t.Run(c.name, c.fn)
	}
}

type suite struct {
	opts     Options
	newStore func(t *testing.T) dedup.Store
}

// app is one case's server: the payment handler behind the middleware,
// on a real HTTP server.
type app struct {
	t      *testing.T
	srv    *httptest.Server
	client *http.Client
	effect *Effect
	runs   atomic.Int32
	// gate, when set, holds each run until it is closed; entered is told
	// of each run that reached it.
	gate    chan struct{}
	entered chan struct{}
	// status is what the handler answers for a run (by its number, from
	// 1); 201 when nil.
	status func(run int32) int
	giveUp func(run int32) bool
	// busy is closed at the first retry that met the key in flight.
	busy     chan struct{}
	busyOnce sync.Once
}

func (a *app) OnKeyInProgress(context.Context, string, time.Duration) {
	a.busyOnce.Do(func() { close(a.busy) })
}

type setup struct {
	runner []idempotency.Option
	mw     []httpidem.Option
	store  func(dedup.Store) dedup.Store // wraps the case's Store
	status func(run int32) int
	gate   bool
	// giveUp says which runs return without writing once their
	// request's context ends, as a handler whose client went away does.
	giveUp func(run int32) bool
	// outer wraps the middleware's handler (counts arrivals).
	outer func(http.Handler) http.Handler
}

func (s *suite) start(t *testing.T, su setup) *app {
	t.Helper()
	st := s.newStore(t)
	a := &app{t: t, status: su.status, giveUp: su.giveUp, busy: make(chan struct{}), entered: make(chan struct{}, 100)}
	if s.opts.Effect != nil {
		e := s.opts.Effect(t, st)
		a.effect = &e
	}
	if su.store != nil {
		st = su.store(st)
	}
	if su.gate {
		a.gate = make(chan struct{})
	}
	run, err := idempotency.New(st, append([]idempotency.Option{idempotency.WithHooks(a)}, su.runner...)...)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpidem.New(run, su.mw...)
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = mw.Wrap(http.HandlerFunc(a.pay))
	if su.outer != nil {
		h = su.outer(h)
	}
	a.srv = httptest.NewServer(h)
	a.client = a.srv.Client()
	t.Cleanup(func() {
		if a.gate != nil {
			select {
			case <-a.gate:
			default:
				close(a.gate)
			}
		}
		a.srv.Close()
		a.client.CloseIdleConnections()
	})
	return a
}

// pay is the handler: it records a payment (the Store's business write,
// when the suite has one) and answers with the run's number, which a
// replay must repeat.
func (a *app) pay(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := strings.Trim(r.Header.Get(httpidem.HeaderKey), `"`)
	n := a.runs.Add(1)
	a.entered <- struct{}{}
	if a.gate != nil {
		<-a.gate
	}
	if a.giveUp != nil && a.giveUp(n) {
		<-r.Context().Done()
		return
	}
	status := http.StatusCreated
	if a.status != nil {
		status = a.status(n)
	}
	if a.effect != nil && r.Method == http.MethodPost {
		if err := httpidem.Tx(r).Write(a.effect.Write(key)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/"+key)
	w.Header().Set("Set-Cookie", fmt.Sprintf("run=%d", n)) // not in the allowlist: never replayed
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"run":%d,"status":%d,"body":%q}`, n, status, body)
}

// response is what the client read.
type response struct {
	status int
	header http.Header
	body   string
}

func (a *app) do(method, path, key, body string) response {
	a.t.Helper()
	h := http.Header{}
	if key != "" {
		h.Set(httpidem.HeaderKey, `"`+key+`"`)
	}
	return a.send(method, path, h, body)
}

// send sends a request with the header fields h.
func (a *app) send(method, path string, h http.Header, body string) response {
	a.t.Helper()
	req, err := http.NewRequest(method, a.srv.URL+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	res, err := a.client.Do(req)
	if err != nil {
		a.t.Error(err)
		return response{}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		a.t.Error(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: string(b)}
}

func (a *app) post(key, body string) response { return a.do(http.MethodPost, "/payments", key, body) }

// applied is how often the key's business write was applied (-1 when
// the suite has none).
func (a *app) applied(key string) int {
	if a.effect == nil {
		return -1
	}
	return a.effect.Count(a.t, key)
}

func (a *app) wantRuns(n int32) {
	a.t.Helper()
	if got := a.runs.Load(); got != n {
		a.t.Errorf("the handler ran %d times, want %d", got, n)
	}
}

func (a *app) wantApplied(key string, n int) {
	a.t.Helper()
	if got := a.applied(key); got >= 0 && got != n {
		a.t.Errorf("the business write was applied %d times, want %d", got, n)
	}
}

func newKey(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "pay-" + hex.EncodeToString(b)
}

// wantProblem checks a problem details answer (RFC 9457) with status.
func wantProblem(t *testing.T, r response, status int, retryAfter bool) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (body %s)", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p struct {
		Type, Title, Detail string
		Status              int
	}
	if err := json.Unmarshal([]byte(r.body), &p); err != nil || p.Status != status || p.Title == "" || p.Detail == "" || p.Type == "" {
		t.Errorf("problem body %s (%v): want type, title, status %d and detail", r.body, err, status)
	}
	if got := r.header.Get("Retry-After"); retryAfter && got == "" {
		t.Error("no Retry-After")
	}
}

func wantReplay(t *testing.T, first, again response) {
	t.Helper()
	if again.status != first.status || again.body != first.body || again.header.Get("Location") != first.header.Get("Location") ||
		again.header.Get("Content-Type") != first.header.Get("Content-Type") {
		t.Errorf("replay %d %v %s, want the stored %d %v %s", again.status, again.header, again.body, first.status, first.header, first.body)
	}
	if again.header.Get(httpidem.HeaderReplayed) != "true" {
		t.Errorf("the replay is not marked with %s: true", httpidem.HeaderReplayed)
	}
	if first.header.Get(httpidem.HeaderReplayed) != "" {
		t.Errorf("the first response is marked as a replay")
	}
	if again.header.Get("Set-Cookie") != "" {
		t.Errorf("a header outside the allowlist was replayed: Set-Cookie %q", again.header.Get("Set-Cookie"))
	}
}

// A POST without a key is 400 and runs nothing; a GET needs none.
func (s *suite) missingKey(t *testing.T) {
	a := s.start(t, setup{})
	wantProblem(t, a.post("", `{"amount":10}`), http.StatusBadRequest, false)
	req, _ := http.NewRequest(http.MethodPost, a.srv.URL+"/payments", nil)
	req.Header.Add(httpidem.HeaderKey, "a")
	req.Header.Add(httpidem.HeaderKey, "b")
	res, err := a.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("two keys: %d, want 400", res.StatusCode)
	}
	a.wantRuns(0)
	if r := a.do(http.MethodGet, "/payments", "", ""); r.status != http.StatusCreated {
		t.Errorf("GET without a key: %d, want the handler's answer", r.status)
	}
}

// A retry gets the stored 201, its allowlisted headers and its body, marked
// as a replay; the handler and its business write ran once.
func (s *suite) replaysSuccess(t *testing.T) {
	a := s.start(t, setup{mw: []httpidem.Option{httpidem.ExpiryHeader()}})
	key := newKey(t)
	first := a.post(key, `{"amount":10}`)
	if first.status != http.StatusCreated || first.header.Get(httpidem.HeaderExpiry) != "86400" {
		t.Fatalf("first: %d %v %s", first.status, first.header, first.body)
	}
	a.wantApplied(key, 1)
	for range 2 {
		wantReplay(t, first, a.post(key, `{"amount":10}`))
	}
	a.wantRuns(1)
	a.wantApplied(key, 1)
}

// A 4xx is stored and replayed as a success is.
func (s *suite) replaysClientError(t *testing.T) {
	a := s.start(t, setup{status: func(int32) int { return http.StatusPaymentRequired }})
	key := newKey(t)
	first := a.post(key, `{"amount":10}`)
	if first.status != http.StatusPaymentRequired {
		t.Fatalf("first: %d", first.status)
	}
	wantReplay(t, first, a.post(key, `{"amount":10}`))
	a.wantRuns(1)
}

// A 5xx is sent and not stored: its business write is not committed, and
// the retry runs the handler again.
func (s *suite) serverErrorNotStored(t *testing.T) {
	a := s.start(t, setup{status: func(n int32) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusCreated
	}})
	key := newKey(t)
	if r := a.post(key, `{"amount":10}`); r.status != http.StatusInternalServerError || !strings.Contains(r.body, `"run":1`) {
		t.Fatalf("first: %d %s, want the handler's 500", r.status, r.body)
	}
	a.wantApplied(key, 0)
	r := a.post(key, `{"amount":10}`)
	if r.status != http.StatusCreated || r.header.Get(httpidem.HeaderReplayed) != "" {
		t.Fatalf("retry after a 500: %d %v, want the handler run again", r.status, r.header)
	}
	a.wantRuns(2)
	a.wantApplied(key, 1)
}

// With StoreServerErrors a 5xx is stored and replayed.
func (s *suite) serverErrorStored(t *testing.T) {
	a := s.start(t, setup{mw: []httpidem.Option{httpidem.StoreServerErrors()},
		status: func(int32) int { return http.StatusBadGateway }})
	key := newKey(t)
	first := a.post(key, "{}")
	if first.status != http.StatusBadGateway {
		t.Fatalf("first: %d", first.status)
	}
	wantReplay(t, first, a.post(key, "{}"))
	a.wantRuns(1)
}

// A retry while the first request runs is 409 with Retry-After; once the
// first is done, a retry gets its answer.
func (s *suite) inFlight409(t *testing.T) {
	a := s.start(t, setup{gate: true})
	key := newKey(t)
	var first response
	done := make(chan struct{})
	go func() { defer close(done); first = a.post(key, "{}") }()
	<-a.entered
	busy := a.post(key, "{}")
	wantProblem(t, busy, http.StatusConflict, true)
	if got := busy.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1: the first request most often ends long before its lease could", got)
	}
	close(a.gate)
	<-done
	wantReplay(t, first, a.post(key, "{}"))
	a.wantRuns(1)
}

// With the Runner's Wait, a retry while the first runs waits and gets its
// answer.
func (s *suite) inFlightWaits(t *testing.T) {
	a := s.start(t, setup{gate: true, runner: []idempotency.Option{idempotency.Wait(time.Minute)}})
	key := newKey(t)
	var first, second response
	var wg sync.WaitGroup
	wg.Go(func() { first = a.post(key, "{}") })
	<-a.entered
	wg.Go(func() { second = a.post(key, "{}") })
	<-a.busy // the retry met the first in flight, and waits
	close(a.gate)
	wg.Wait()
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	wantReplay(t, first, second)
	a.wantRuns(1)
}

// The key with another body, or another path, is 422.
func (s *suite) keyReuse(t *testing.T) {
	a := s.start(t, setup{})
	key := newKey(t)
	if r := a.post(key, `{"amount":10}`); r.status != http.StatusCreated {
		t.Fatalf("first: %d", r.status)
	}
	wantProblem(t, a.post(key, `{"amount":99}`), http.StatusUnprocessableEntity, false)
	wantProblem(t, a.do(http.MethodPost, "/refunds", key, `{"amount":10}`), http.StatusUnprocessableEntity, false)
	a.wantRuns(1)
}

// The key again with another query is another request: 422, not the
// stored answer of the first.
func (s *suite) queryFingerprinted(t *testing.T) {
	a := s.start(t, setup{})
	key := newKey(t)
	if r := a.do(http.MethodPost, "/payments?to=alice", key, `{"amount":10}`); r.status != http.StatusCreated {
		t.Fatalf("first: %d", r.status)
	}
	wantProblem(t, a.do(http.MethodPost, "/payments?to=bob", key, `{"amount":10}`), http.StatusUnprocessableEntity, false)
	wantProblem(t, a.do(http.MethodPost, "/payments", key, `{"amount":10}`), http.StatusUnprocessableEntity, false)
	a.wantRuns(1)
}

// One key sent with another caller's credentials is another key: the
// handler runs for each caller, and each caller's retry gets its own
// answer, never the other's. Unscoped shares keys between callers.
func (s *suite) scopedToCaller(t *testing.T) {
	a := s.start(t, setup{})
	key := newKey(t)
	as := func(auth string) response {
		h := http.Header{httpidem.HeaderKey: {`"` + key + `"`}}
		if auth != "" {
			h.Set("Authorization", auth)
		}
		return a.send(http.MethodPost, "/payments", h, `{"amount":10}`)
	}
	alice := as("Bearer alice-token")
	bob := as("Bearer bob-token")
	anonymous := as("")
	for i, r := range []response{alice, bob, anonymous} {
		if r.status != http.StatusCreated || r.header.Get(httpidem.HeaderReplayed) != "" || !strings.Contains(r.body, fmt.Sprintf(`"run":%d`, i+1)) {
			t.Errorf("caller %d: %d %v %s, want the handler's own run %d", i+1, r.status, r.header, r.body, i+1)
		}
	}
	wantReplay(t, alice, as("Bearer alice-token"))
	wantReplay(t, bob, as("Bearer bob-token"))
	wantReplay(t, anonymous, as(""))
	a.wantRuns(3)
	a.wantApplied(key, 3)

	u := s.start(t, setup{mw: []httpidem.Option{httpidem.Unscoped()}})
	h := func(auth string) http.Header {
		return http.Header{httpidem.HeaderKey: {`"` + key + `"`}, "Authorization": {auth}}
	}
	first := u.send(http.MethodPost, "/payments", h("Bearer alice-token"), "{}")
	wantReplay(t, first, u.send(http.MethodPost, "/payments", h("Bearer bob-token"), "{}"))
	u.wantRuns(1)
}

// A key that is not one Structured Field String of 1 to 255 printable
// ASCII characters is refused with 400 and a problem that says why; the
// handler does not run. The longest key is taken.
func (s *suite) keySyntax(t *testing.T) {
	a := s.start(t, setup{})
	for _, c := range []struct{ value, why string }{
		{`"unterminated`, "no closing quote"},
		{`:Ynl0ZXM=:`, "byte sequence"},
		{`12345`, "number"},
		{`?bad`, "boolean"},
		{`pay-bare-token`, "bare token"},
		{`"a\nb"`, "backslash"},
		{`"a";p=1`, "after its closing quote"},
		{`""`, "empty"},
		{`"` + strings.Repeat("k", 300) + `"`, "at most 255"},
		{`"` + strings.Repeat("k", 256) + `"`, "at most 255"},
	} {
		r := a.send(http.MethodPost, "/payments", http.Header{httpidem.HeaderKey: {c.value}}, "{}")
		wantProblem(t, r, http.StatusBadRequest, false)
		if !strings.Contains(r.body, c.why) {
			t.Errorf("key %.20q: problem %s does not say %q", c.value, r.body, c.why)
		}
	}
	a.wantRuns(0)
	longest := newKey(t) + strings.Repeat("k", 255-len(newKey(t)))
	if r := a.do(http.MethodPost, "/payments", longest, "{}"); r.status != http.StatusCreated {
		t.Errorf("a key of 255 characters: %d %s, want the handler's 201", r.status, r.body)
	}
	a.wantRuns(1)
}

// Keys that differ only in the characters a Store or the stored key's
// encoding could treat specially (a quote, a backslash, '#', '!', ':', a
// space), and the longest key of escapes, are each their own: each runs
// once and is replayed.
func (s *suite) keyCharacters(t *testing.T) {
	a := s.start(t, setup{})
	base := newKey(t)
	values := []string{`"` + base + `\"b"`, `"` + base + `\\b"`, `"` + base + `#b"`, `"!` + base + `#b"`, `"` + base + `:b"`,
		`"` + base + ` b"`, `"` + base + `b"`, `"` + strings.Repeat(`\\`, 255) + `"`, `"` + strings.Repeat(`\\`, 254) + `"`}
	first := make([]response, len(values))
	for i, v := range values {
		first[i] = a.send(http.MethodPost, "/payments", http.Header{httpidem.HeaderKey: {v}}, "{}")
		if first[i].status != http.StatusCreated || !strings.Contains(first[i].body, fmt.Sprintf(`"run":%d`, i+1)) {
			t.Fatalf("key %d: %d %s, want run %d", i, first[i].status, first[i].body, i+1)
		}
	}
	for i, v := range values {
		wantReplay(t, first[i], a.send(http.MethodPost, "/payments", http.Header{httpidem.HeaderKey: {v}}, "{}"))
	}
	a.wantRuns(int32(len(values)))
}

// A response longer than a stored one may be is sent whole to its
// request, and its writes commit; a retry gets its status and Location
// with a problem that names the limit, and never runs the handler again.
func (s *suite) oversizeResponse(t *testing.T) {
	a := s.start(t, setup{})
	key := newKey(t)
	big := `"` + strings.Repeat("x", httpidem.DefaultMaxResponseBytes) + `"` // echoed by the handler
	first := a.post(key, big)
	if first.status != http.StatusCreated || !strings.Contains(first.body, big[:100]) || len(first.body) <= httpidem.DefaultMaxResponseBytes {
		t.Fatalf("first: %d, %d bytes, want the handler's whole 201", first.status, len(first.body))
	}
	a.wantApplied(key, 1)
	for range 2 {
		r := a.post(key, big)
		if r.status != http.StatusCreated || r.header.Get(httpidem.HeaderReplayed) != "true" || r.header.Get("Location") != first.header.Get("Location") {
			t.Fatalf("retry: %d %v, want the stored 201 with its Location, replayed", r.status, r.header)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" ||
			!strings.Contains(r.body, strconv.Itoa(httpidem.DefaultMaxResponseBytes)+" bytes") {
			t.Errorf("retry: %s %s, want a problem that names the limit", ct, r.body)
		}
	}
	a.wantRuns(1)
	a.wantApplied(key, 1)
}

// 50 retries of one key at once, waiting for the first: the handler runs
// once, and every client gets its answer.
func (s *suite) fiftyRetries(t *testing.T) {
	const n = 50
	var arrived atomic.Int32
	all := make(chan struct{})
	a := s.start(t, setup{runner: []idempotency.Option{idempotency.Wait(2 * time.Minute)},
		outer: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if arrived.Add(1) == n {
					close(all)
				}
				h.ServeHTTP(w, r)
			})
		}})
	a.gate = all // the run finishes once every request has reached the server
	key := newKey(t)
	got := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i] = a.post(key, `{"amount":10}`) })
	}
	wg.Wait()
	a.wantRuns(1)
	a.wantApplied(key, 1)
	replays := 0
	for _, r := range got {
		if r.status != http.StatusCreated || r.body != got[0].body {
			t.Fatalf("a client got %d %s, want the one answer %d %s", r.status, r.body, got[0].status, got[0].body)
		}
		if r.header.Get(httpidem.HeaderReplayed) == "true" {
			replays++
		}
	}
	if replays != n-1 {
		t.Errorf("%d replays, want %d", replays, n-1)
	}
}

// outage is a Store whose every call fails as an outage does, until it is
// ended.
type outage struct {
	dedup.Store
	out atomic.Bool
}

var errOutage = retry.WithClass(errors.New("connection refused"), retry.Transient)

func (o *outage) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	if o.out.Load() {
		return dedup.Claim{}, errOutage
	}
	return o.Store.Claim(ctx, req)
}

// A store outage is 503 with Retry-After, runs nothing and stores
// nothing: the retry after it runs the handler.
func (s *suite) outage(t *testing.T) {
	var o *outage
	a := s.start(t, setup{store: func(st dedup.Store) dedup.Store { o = &outage{Store: st}; o.out.Store(true); return o },
		runner: []idempotency.Option{idempotency.StoreRetryAfter(2 * time.Second)}})
	key := newKey(t)
	r := a.post(key, "{}")
	wantProblem(t, r, http.StatusServiceUnavailable, true)
	if r.header.Get("Retry-After") != "2" {
		t.Errorf("Retry-After %q, want 2", r.header.Get("Retry-After"))
	}
	a.wantRuns(0)
	o.out.Store(false)
	if r := a.post(key, "{}"); r.status != http.StatusCreated || r.header.Get(httpidem.HeaderReplayed) != "" {
		t.Errorf("after the outage: %d %v, want the handler's first answer", r.status, r.header)
	}
	a.wantRuns(1)
}

// callOver is closed at the first call's outcome (a retry that polls a
// record failed moments ago has one per look).
type callOver struct {
	done chan struct{}
	once sync.Once
}

func (c *callOver) OnMessageOutcome(context.Context, *consumer.Message, consumer.Outcome, time.Duration) {
	c.once.Do(func() { close(c.done) })
}

// A handler that gives up when its client goes away, answering nothing,
// stores nothing and commits nothing: the client's retry runs it.
func (s *suite) abandoned(t *testing.T) {
	over := &callOver{done: make(chan struct{})}
	a := s.start(t, setup{giveUp: func(run int32) bool { return run == 1 }, runner: []idempotency.Option{idempotency.WithHooks(over)}})
	key := newKey(t)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.srv.URL+"/payments", strings.NewReader("{}"))
	req.Header.Set(httpidem.HeaderKey, `"`+key+`"`)
	errc := make(chan error, 1)
	go func() {
		res, err := a.client.Do(req)
		if err == nil {
			_ = res.Body.Close()
		}
		errc <- err
	}()
	<-a.entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("first: %v, want the client's cancellation", err)
	}
	<-over.done
	a.wantApplied(key, 0)
	if r := a.post(key, "{}"); r.status != http.StatusCreated || r.header.Get(httpidem.HeaderReplayed) != "" || !strings.Contains(r.body, `"run":2`) {
		t.Errorf("retry: %d %v %s, want the handler run again", r.status, r.header, r.body)
	}
	a.wantRuns(2)
	a.wantApplied(key, 1)
}
