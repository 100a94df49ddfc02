package httpidem_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/idempotency"
	"github.com/onceq/onceq/idempotency/httpidem"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/retry"
)

// outcomes tells a test of each call's outcome, so that it knows a
// request's call is over (committed or freed) before it sends the retry.
type outcomes chan consumer.Kind

func (o outcomes) OnMessageOutcome(_ context.Context, _ *consumer.Message, oc consumer.Outcome, _ time.Duration) {
	o <- oc.Kind
}

// reviewServer is the middleware over a fresh memory Store in front of h,
// on a real server; its outcomes channel gets each call's outcome.
type reviewServer struct {
	srv  *httptest.Server
	done outcomes
	logs *bytes.Buffer
}

func newReviewServer(t *testing.T, h http.HandlerFunc, opts ...httpidem.Option) *reviewServer {
	t.Helper()
	rs := &reviewServer{done: make(outcomes, 100), logs: &bytes.Buffer{}}
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, rs.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	run, err := idempotency.New(memstoretest.New(t), idempotency.WithHooks(rs.done), idempotency.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpidem.New(run, opts...)
	if err != nil {
		t.Fatal(err)
	}
	rs.srv = httptest.NewServer(mw.Wrap(h))
	t.Cleanup(rs.srv.Close)
	t.Cleanup(rs.srv.Client().CloseIdleConnections)
	return rs
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// post sends POST /orders with the key and the header fields in pairs.
func (rs *reviewServer) post(ctx context.Context, key, body string, fields ...string) (*http.Response, string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rs.srv.URL+"/orders", strings.NewReader(body))
	req.Header.Set(httpidem.HeaderKey, key)
	for i := 0; i+1 < len(fields); i += 2 {
		req.Header.Add(fields[i], fields[i+1])
	}
	res, err := rs.srv.Client().Do(req)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	return res, string(b), err
}

func (rs *reviewServer) mustPost(t *testing.T, key, body string, fields ...string) (*http.Response, string) {
	t.Helper()
	res, b, err := rs.post(context.Background(), key, body, fields...)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// A handler that sends an informational response (103 Early Hints) and
// then fails with a 500 must not have its failure stored: the client is
// told 500, and its retry runs the handler again.
func TestReviewEarlyHintsThen500NotStored(t *testing.T) {
	var runs atomic.Int32
	rs := newReviewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		n := runs.Add(1)
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		if n == 1 {
			http.Error(w, "database down", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	res, body := rs.mustPost(t, `"hints-1"`, "{}")
	if res.StatusCode != http.StatusInternalServerError {
		t.Errorf("first: %d %q, want the handler's 500", res.StatusCode, body)
	}
	<-rs.done
	res, body = rs.mustPost(t, `"hints-1"`, "{}")
	if res.StatusCode != http.StatusCreated || res.Header.Get(httpidem.HeaderReplayed) != "" || runs.Load() != 2 {
		t.Errorf("retry: %d %v %q after %d runs, want the handler run again (201)", res.StatusCode, res.Header, body, runs.Load())
	}
}

// A handler that gives up when its client goes away (it returns without
// writing, as handlers that watch r.Context() do) has not answered: an
// empty 200 must not be stored and replayed to the client's retry as if
// the request had been done.
func TestReviewAbandonedOnCancelNotStored(t *testing.T) {
	var runs atomic.Int32
	entered := make(chan struct{}, 2)
	rs := newReviewServer(t, func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			entered <- struct{}{}
			<-r.Context().Done() // the client went away: nothing done
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"order-1"}`)
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := rs.post(ctx, `"cancel-1"`, "{}")
		errc <- err
	}()
	<-entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("first: %v, want the client's cancellation", err)
	}
	<-rs.done // the first call is over
	res, body := rs.mustPost(t, `"cancel-1"`, "{}")
	if res.StatusCode != http.StatusCreated || body != `{"id":"order-1"}` || runs.Load() != 2 {
		t.Errorf("retry: %d %v %q after %d runs, want the handler run again: the first did nothing", res.StatusCode, res.Header, body, runs.Load())
	}
}

// A status net/http refuses (it panics in WriteHeader) is the handler's
// fault, like a panic: nothing is stored, the request gets a 500, and a
// retry runs the handler again, rather than a record that makes every
// replay of the key panic.
func TestReviewInvalidStatusNotStored(t *testing.T) {
	var runs atomic.Int32
	rs := newReviewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		if runs.Add(1) == 1 {
			w.WriteHeader(99)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	res, body, err := rs.post(context.Background(), `"status-1"`, "{}")
	<-rs.done
	if err != nil || res.StatusCode != http.StatusInternalServerError {
		t.Errorf("first: %v %v %q, want a 500 problem", err, res, body)
	}
	res, body, err = rs.post(context.Background(), `"status-1"`, "{}")
	if err != nil || res.StatusCode != http.StatusCreated {
		t.Errorf("retry: %v %v %q after %d runs, want the handler run again (201)", err, res, body, runs.Load())
	}
}

// A panic is a failure: a 500 problem, nothing stored, and the retry runs
// the handler again (not a 409 while a lease runs out).
func TestReviewPanicFreesKey(t *testing.T) {
	var runs atomic.Int32
	rs := newReviewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		if runs.Add(1) == 1 {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "half")
			panic("boom")
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "whole")
	})
	res, body := rs.mustPost(t, `"panic-1"`, "{}")
	if res.StatusCode != http.StatusInternalServerError || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("first: %d %q, want a 500 problem", res.StatusCode, body)
	}
	<-rs.done
	res, body = rs.mustPost(t, `"panic-1"`, "{}")
	if res.StatusCode != http.StatusCreated || body != "whole" || runs.Load() != 2 {
		t.Errorf("retry: %d %q after %d runs, want the handler run again", res.StatusCode, body, runs.Load())
	}
}

// A response exactly MaxResponseBytes long as stored is kept whole; one
// byte more is replaced by the problem naming the limit.
func TestReviewResponseAtLimit(t *testing.T) {
	const limit = 4096
	// Stored: the format byte, the status (2 bytes), the field count (1
	// byte, no allowlisted field set), then the body.
	for _, c := range []struct {
		body  int
		whole bool
	}{{limit - 4, true}, {limit - 3, false}} {
		var runs atomic.Int32
		rs := newReviewServer(t, func(w http.ResponseWriter, _ *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(bytes.Repeat([]byte("x"), c.body))
		}, httpidem.MaxResponseBytes(limit))
		first, fb := rs.mustPost(t, `"limit"`, "{}")
		<-rs.done
		again, ab := rs.mustPost(t, `"limit"`, "{}")
		switch {
		case first.StatusCode != http.StatusCreated || len(fb) != c.body:
			t.Errorf("body %d: first %d, %d bytes, want the whole 201", c.body, first.StatusCode, len(fb))
		case again.StatusCode != http.StatusCreated || again.Header.Get(httpidem.HeaderReplayed) != "true" || runs.Load() != 1:
			t.Errorf("body %d: retry %d %v after %d runs, want a replayed 201", c.body, again.StatusCode, again.Header, runs.Load())
		case c.whole && ab != fb:
			t.Errorf("body %d: replayed %d bytes, want the whole body", c.body, len(ab))
		case !c.whole && !strings.Contains(ab, fmt.Sprintf("%d bytes kept", limit)):
			t.Errorf("body %d: replayed %q, want the problem naming the limit", c.body, ab)
		}
	}
}

// Keys with every character that matters to the middleware or a Store (a
// quote, a backslash, '#', '!', ':', a space) are kept apart, each its
// own, and each replayed; a key of 255 escaped characters is taken.
func TestReviewKeyCharacters(t *testing.T) {
	var runs atomic.Int32
	rs := newReviewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprint(w, runs.Add(1))
	})
	keys := []string{`"a\"b"`, `"a\\b"`, `"a#b"`, `"!a#b"`, `"a:b"`, `"a b"`, `"ab"`, `"` + strings.Repeat(`\\`, 255) + `"`, `"` + strings.Repeat(`\\`, 254) + `"`}
	first := map[string]string{}
	for _, k := range keys {
		res, body := rs.mustPost(t, k, "{}")
		<-rs.done
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("key %.20s: %d %s", k, res.StatusCode, body)
		}
		first[k] = body
	}
	for _, k := range keys {
		res, body := rs.mustPost(t, k, "{}")
		<-rs.done
		if body != first[k] || res.Header.Get(httpidem.HeaderReplayed) != "true" {
			t.Errorf("key %.20s: %d %q, want the replay of run %s", k, res.StatusCode, body, first[k])
		}
	}
	if int(runs.Load()) != len(keys) {
		t.Errorf("%d runs for %d keys", runs.Load(), len(keys))
	}
	if res, body := rs.mustPost(t, `"`+strings.Repeat(`\\`, 256)+`"`, "{}"); res.StatusCode != http.StatusBadRequest {
		t.Errorf("256 escaped characters: %d %s, want 400", res.StatusCode, body)
	}
}

// Authorization fields that differ in any way (order, count, one field
// with a list, empty or absent) are other callers: no replay between them.
func TestReviewScopeVariants(t *testing.T) {
	var runs atomic.Int32
	rs := newReviewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprint(w, runs.Add(1))
	})
	variants := [][]string{
		nil,
		{"Authorization", ""},
		{"Authorization", "a"},
		{"Authorization", "a", "Authorization", "b"},
		{"Authorization", "b", "Authorization", "a"},
		{"Authorization", "a, b"},
		{"Authorization", "a,b"},
		{"Authorization", "A"},
		{"Authorization", "a", "Authorization", ""},
	}
	for i, v := range variants {
		res, body := rs.mustPost(t, `"scope-1"`, "{}", v...)
		<-rs.done
		if res.StatusCode != http.StatusCreated || body != fmt.Sprint(i+1) {
			t.Errorf("variant %d %q: %d %q, want its own run %d", i, v, res.StatusCode, body, i+1)
		}
	}
}

// The key never appears in a log line, whatever becomes of its request:
// run, replayed, reused, failed, panicked, in flight.
func TestReviewKeyNotLogged(t *testing.T) {
	const secret = "key-4f1d9c-SECRET"
	var runs atomic.Int32
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	rs := newReviewServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch runs.Add(1) {
		case 1:
			panic("boom")
		case 2:
			http.Error(w, "down", http.StatusServiceUnavailable)
		case 4:
			entered <- struct{}{}
			<-gate
		}
		w.WriteHeader(http.StatusCreated)
	})
	k := `"` + secret + `"`
	for _, body := range []string{"{}", "{}", "{}", "{}", "other"} {
		rs.mustPost(t, k, body)
		<-rs.done
	}
	k2 := `"` + secret + `-2"`
	errc := make(chan error, 1)
	go func() {
		_, _, err := rs.post(context.Background(), k2, "{}")
		errc <- err
	}()
	<-entered
	if res, _ := rs.mustPost(t, k2, "{}"); res.StatusCode != http.StatusConflict || res.Header.Get("Retry-After") != "1" {
		t.Errorf("in flight: %d %v, want 409 with Retry-After: 1", res.StatusCode, res.Header)
	}
	close(gate)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	<-rs.done
	<-rs.done
	if strings.Contains(rs.logs.String(), "SECRET") {
		t.Errorf("the key is in the logs:\n%s", rs.logs)
	}
}

// The Host is in neither the default fingerprint nor the default scope:
// a retry that comes in under another name of the same server, or in
// absolute form through a forward proxy (POST http://host/orders?to=a),
// is the same request and gets the stored answer, not a second run nor a
// 422. A server of several virtual hosts adds the Host to its Scope.
func TestReviewHostInFingerprint(t *testing.T) {
	var runs atomic.Int32
	h := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, "run %d", runs.Add(1))
	}
	// send posts to host, in origin form or, through the server as a
	// forward proxy, in absolute form.
	send := func(rs *reviewServer, host string, absolute bool) (*http.Response, string) {
		t.Helper()
		client, target := rs.srv.Client(), rs.srv.URL+"/orders?to=a"
		if absolute {
			proxy, _ := url.Parse(rs.srv.URL)
			tr := &http.Transport{Proxy: http.ProxyURL(proxy)}
			defer tr.CloseIdleConnections()
			client, target = &http.Client{Transport: tr}, "http://"+host+"/orders?to=a"
		}
		req, _ := http.NewRequest(http.MethodPost, target, strings.NewReader("{}"))
		req.Host = host
		req.Header.Set(httpidem.HeaderKey, `"host-1"`)
		req.Header.Set("Authorization", "Bearer shared")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		<-rs.done
		return res, string(b)
	}
	rs := newReviewServer(t, h)
	send(rs, "api.example", false)
	for _, c := range []struct {
		host     string
		absolute bool
	}{{"api-eu.example", false}, {"api.example", true}, {"api-eu.example", true}} {
		res, body := send(rs, c.host, c.absolute)
		if res.StatusCode != http.StatusCreated || res.Header.Get(httpidem.HeaderReplayed) != "true" || body != "run 1" {
			t.Errorf("%s, absolute form %v: %d %v %q, want the replay of run 1", c.host, c.absolute, res.StatusCode, res.Header, body)
		}
	}
	// Virtual hosts behind one Middleware: the Host in the Scope.
	runs.Store(0)
	rs = newReviewServer(t, h, httpidem.Scope(func(r *http.Request) string {
		return strings.ToLower(r.Host) + " " + httpidem.DefaultScope(r)
	}))
	for i, c := range []struct {
		host     string
		absolute bool
		want     string
	}{{"tenant-a.example", false, "run 1"}, {"tenant-b.example", false, "run 2"}, {"tenant-b.example", true, "run 2"}} {
		if res, body := send(rs, c.host, c.absolute); body != c.want || (res.Header.Get(httpidem.HeaderReplayed) == "true") != (i == 2) {
			t.Errorf("scoped by host, %s, absolute form %v: %d %v %q, want %s", c.host, c.absolute, res.StatusCode, res.Header, body, c.want)
		}
	}
}

// A chunked body (no Content-Length) is bounded like any other: at the
// limit it is taken, one byte over it is 413 and runs nothing.
func TestReviewChunkedBodyLimit(t *testing.T) {
	var runs atomic.Int32
	rs := newReviewServer(t, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		b, _ := io.ReadAll(r.Body)
		_, _ = fmt.Fprint(w, len(b))
	}, httpidem.MaxBodyBytes(1000))
	for _, c := range []struct {
		n      int
		status int
	}{{1000, http.StatusOK}, {1001, http.StatusRequestEntityTooLarge}} {
		req, _ := http.NewRequest(http.MethodPost, rs.srv.URL+"/orders", io.MultiReader(strings.NewReader(strings.Repeat("x", c.n))))
		req.ContentLength = -1
		req.Header.Set(httpidem.HeaderKey, fmt.Sprintf(`"chunk-%d"`, c.n))
		res, err := rs.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode != c.status || (c.status == http.StatusOK && string(b) != "1000") {
			t.Errorf("chunked body of %d: %d %q, want %d", c.n, res.StatusCode, b, c.status)
		}
	}
	if runs.Load() != 1 {
		t.Errorf("%d runs, want 1", runs.Load())
	}
}

// Twenty copies of one request at once: the handler runs once; every
// other copy gets 409 with Retry-After or the replay, never a run.
func TestReviewConcurrentCopies(t *testing.T) {
	var runs atomic.Int32
	gate := make(chan struct{})
	rs := newReviewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		<-gate
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "done")
	})
	const n = 20
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	for range n {
		wg.Go(func() {
			res, body, err := rs.post(context.Background(), `"conc-1"`, "{}")
			if err != nil {
				t.Error(err)
				return
			}
			if res.StatusCode == http.StatusConflict && res.Header.Get("Retry-After") == "" {
				t.Error("409 without Retry-After")
			}
			if res.StatusCode == http.StatusCreated && body != "done" {
				t.Errorf("201 with %q", body)
			}
			statuses <- res.StatusCode
		})
	}
	// Every copy but the one that runs has its answer before the gate
	// opens: 19 outcomes (in flight), then the run's.
	for range n - 1 {
		<-rs.done
	}
	close(gate)
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if runs.Load() != 1 || count[http.StatusCreated] != 1 || count[http.StatusConflict] != n-1 {
		t.Errorf("%d runs, statuses %v: want 1 run, one 201 and %d 409s", runs.Load(), count, n-1)
	}
}

// A 408, 425 or 429 (or a 503) says "not now", not "done": a handler that
// rate-limits inside the middleware must not have its 429 stored and
// replayed for the whole Retention, or the client can never get the
// request done under its key, even after waiting the Retry-After it was
// given. Nothing is stored, not even with StoreServerErrors, its writes
// do not commit, and no expiry is stated.
func TestReviewTooManyRequestsNotStored(t *testing.T) {
	for _, c := range []struct {
		status int
		opts   []httpidem.Option
	}{
		{http.StatusTooManyRequests, nil},
		{http.StatusRequestTimeout, nil},
		{http.StatusTooEarly, nil},
		{http.StatusServiceUnavailable, []httpidem.Option{httpidem.StoreServerErrors()}},
	} {
		var runs, applied atomic.Int32
		rs := newReviewServer(t, func(w http.ResponseWriter, r *http.Request) {
			_ = httpidem.Tx(r).Write(memstore.Write{Apply: func() { applied.Add(1) }})
			if runs.Add(1) == 1 {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "not now", c.status)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}, append(c.opts, httpidem.ExpiryHeader())...)
		res, _ := rs.mustPost(t, `"later-1"`, "{}")
		<-rs.done
		if res.StatusCode != c.status || res.Header.Get("Retry-After") != "1" || res.Header.Get(httpidem.HeaderExpiry) != "" || applied.Load() != 0 {
			t.Errorf("%d: first %d %v, %d writes applied: want the handler's answer, unstored, its writes not committed", c.status, res.StatusCode, res.Header, applied.Load())
		}
		res, body := rs.mustPost(t, `"later-1"`, "{}")
		<-rs.done
		if res.StatusCode != http.StatusCreated || res.Header.Get(httpidem.HeaderReplayed) != "" || runs.Load() != 2 || applied.Load() != 1 {
			t.Errorf("%d: retry %d %v %q after %d runs, %d writes applied: want the handler run again", c.status, res.StatusCode, res.Header, body, runs.Load(), applied.Load())
		}
	}
	// StoreServerErrors still stores another 5xx.
	var runs atomic.Int32
	rs := newReviewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		http.Error(w, "broken", http.StatusInternalServerError)
	}, httpidem.StoreServerErrors())
	rs.mustPost(t, `"later-2"`, "{}")
	<-rs.done
	if res, _ := rs.mustPost(t, `"later-2"`, "{}"); res.StatusCode != http.StatusInternalServerError || res.Header.Get(httpidem.HeaderReplayed) != "true" || runs.Load() != 1 {
		t.Errorf("StoreServerErrors, 500: retry %d %v after %d runs, want the replay", res.StatusCode, res.Header, runs.Load())
	}
}

// A handler that flushes (through http.Flusher or a ResponseController)
// sends nothing early: the answer is kept whole until it is stored, the
// flush says it was not done, and the replay is the same answer.
func TestReviewFlushDoesNotBypass(t *testing.T) {
	var runs atomic.Int32
	var flushErr error
	var isFlusher bool
	rs := newReviewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		_, isFlusher = w.(http.Flusher)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "part1 ")
		flushErr = http.NewResponseController(w).Flush()
		_, _ = io.WriteString(w, "part2")
	})
	_, b1 := rs.mustPost(t, `"flush-1"`, "{}")
	<-rs.done
	res, b2 := rs.mustPost(t, `"flush-1"`, "{}")
	if b1 != "part1 part2" || b2 != b1 || res.Header.Get(httpidem.HeaderReplayed) != "true" || runs.Load() != 1 {
		t.Errorf("first %q, replay %q after %d runs: want the whole answer both times, run once", b1, b2, runs.Load())
	}
	if isFlusher || !errors.Is(flushErr, http.ErrNotSupported) {
		t.Errorf("Flusher %v, ResponseController.Flush %v: want no flushing, said so", isFlusher, flushErr)
	}
}

// The expiry policy is stated on what is kept under the key: a 5xx that
// is not stored must not tell the client its key is held for the
// Retention, when its retry runs the handler again.
func TestReviewExpiryHeaderOnlyWhenStored(t *testing.T) {
	var runs atomic.Int32
	rs := newReviewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		if runs.Add(1) == 1 {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}, httpidem.ExpiryHeader())
	res, _ := rs.mustPost(t, `"exp-1"`, "{}")
	<-rs.done
	if got := res.Header.Get(httpidem.HeaderExpiry); res.StatusCode != http.StatusBadGateway || got != "" {
		t.Errorf("unstored 502: %s %q, want no expiry stated", httpidem.HeaderExpiry, got)
	}
	res, _ = rs.mustPost(t, `"exp-1"`, "{}")
	if got := res.Header.Get(httpidem.HeaderExpiry); res.StatusCode != http.StatusCreated || got != "86400" {
		t.Errorf("stored 201: %d %s %q, want 86400", res.StatusCode, httpidem.HeaderExpiry, got)
	}
}

// The problem stored in place of a response over the limit is a new
// body: header fields that describe the old one (its Content-Encoding,
// say, replayed by ReplayHeaders) must not come with it, or the client
// cannot read the replay.
func TestReviewOversizeDropsRepresentationFields(t *testing.T) {
	rs := newReviewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Location", "/orders/1")
		w.WriteHeader(http.StatusCreated)
		zw := gzip.NewWriter(w)
		for i := range 2000 { // a random-looking body gzip cannot shrink under the limit
			_, _ = fmt.Fprintf(zw, "%x", sha256.Sum256([]byte{byte(i), byte(i >> 8)}))
		}
		_ = zw.Close()
	}, httpidem.ReplayHeaders("Content-Type", "Location", "Content-Encoding"), httpidem.MaxResponseBytes(4096))
	first, _ := rs.mustPost(t, `"gz-1"`, "{}")
	<-rs.done
	res, body, err := rs.post(context.Background(), `"gz-1"`, "{}")
	if err != nil {
		t.Fatalf("first %d; replay unreadable: %v", first.StatusCode, err)
	}
	if res.StatusCode != http.StatusCreated || res.Header.Get("Location") != "/orders/1" || !strings.Contains(body, "4096 bytes") {
		t.Errorf("replay: %d %v %q, want the 201 with its Location and the problem naming the limit", res.StatusCode, res.Header, body)
	}
}

// completeOutage is a memory Store whose Complete fails as an outage
// does: the handler runs, its answer cannot be stored.
type completeOutage struct{ dedup.Store }

func (completeOutage) Complete(context.Context, dedup.CompleteRequest) error {
	return retry.WithClass(errors.New("connection reset"), retry.Transient)
}

// An outage when the answer is to be stored: the client gets a 503 with
// Retry-After, never the answer that was not kept (its retry would run
// the handler again, and may answer otherwise).
func TestReviewCompleteOutageIs503(t *testing.T) {
	var runs atomic.Int32
	run, err := idempotency.New(completeOutage{memstoretest.New(t)}, idempotency.InProgressExpiry(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpidem.New(run)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"order-1"}`)
	})))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader("{}"))
	req.Header.Set(httpidem.HeaderKey, `"outage-1"`)
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || strings.Contains(string(b), "order-1") {
		t.Errorf("%d %v %s after %d runs: want a 503 problem with Retry-After", res.StatusCode, res.Header, b, runs.Load())
	}
}

// As net/http: a header field changed after the status was written (by
// WriteHeader or the first Write) is not part of the response, so it is
// neither sent nor stored and replayed; nor is one added after it, on an
// answer stored or not.
func TestReviewHeaderAfterWriteHeaderIgnored(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		write  func(w http.ResponseWriter, status int)
	}{
		{"WriteHeader", http.StatusCreated, func(w http.ResponseWriter, status int) { w.WriteHeader(status) }},
		{"Write", http.StatusOK, func(w http.ResponseWriter, _ int) { _, _ = io.WriteString(w, "done") }},
		{"unstored 5xx", http.StatusBadGateway, func(w http.ResponseWriter, status int) { w.WriteHeader(status) }},
	} {
		rs := newReviewServer(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Location", "/orders/1")
			c.write(w, c.status)
			w.Header().Set("Location", "/late")
			w.Header().Set("X-Late", "late")
		})
		first, _ := rs.mustPost(t, `"late-1"`, "{}")
		<-rs.done
		again, _ := rs.mustPost(t, `"late-1"`, "{}")
		<-rs.done
		if a, b := first.Header.Get("Location"), again.Header.Get("Location"); first.StatusCode != c.status || a != "/orders/1" || b != "/orders/1" {
			t.Errorf("%s: %d, Location first %q, then %q: want /orders/1, as written with the status", c.name, first.StatusCode, a, b)
		}
		if first.Header.Get("X-Late") != "" {
			t.Errorf("%s: X-Late, added after the status, was sent", c.name)
		}
	}
}

// Trailer fields (declared in the Trailer field, or named with
// http.TrailerPrefix) set after the body reach the client of the first
// response as trailers, not as header fields; a replay has none.
func TestReviewLiveTrailers(t *testing.T) {
	var runs atomic.Int32
	rs := newReviewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		w.Header().Set("Trailer", "X-Sum")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-Sum", "abc")
		w.Header().Set(http.TrailerPrefix+"X-Late", "def")
	})
	first, b1 := rs.mustPost(t, `"trailer-1"`, "{}")
	<-rs.done
	if first.StatusCode != http.StatusCreated || b1 != "body" || first.Trailer.Get("X-Sum") != "abc" || first.Trailer.Get("X-Late") != "def" || first.Header.Get("X-Sum") != "" {
		t.Errorf("first: %d %q, header %v, trailer %v: want X-Sum and X-Late as trailers only", first.StatusCode, b1, first.Header, first.Trailer)
	}
	again, b2 := rs.mustPost(t, `"trailer-1"`, "{}")
	<-rs.done
	if again.Header.Get(httpidem.HeaderReplayed) != "true" || b2 != "body" || len(again.Trailer) != 0 || runs.Load() != 1 {
		t.Errorf("replay: %v %q, trailer %v after %d runs: want the stored answer, without trailers", again.Header, b2, again.Trailer, runs.Load())
	}
}
