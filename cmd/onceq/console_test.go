package main

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// The console listens on loopback; an address other machines may reach
// is refused unless -public says so.
func TestConsoleListenAddress(t *testing.T) {
	for _, c := range []struct {
		addr   string
		public bool
		ok     bool
	}{
		{"127.0.0.1:8080", false, true},
		{"[::1]:0", false, true},
		{"localhost:8080", false, true},
		{":8080", false, false},
		{"0.0.0.0:8080", false, false},
		{"192.0.2.7:8080", false, false},
		{"console.example:8080", false, false},
		{"0.0.0.0:8080", true, true},
		{"8080", true, false},
	} {
		err := listenAllowed(c.addr, c.public)
		if (err == nil) != c.ok {
			t.Errorf("-addr %s -public=%v: %v, want allowed %v", c.addr, c.public, err, c.ok)
		}
	}
	code, _, errOut := onceq("console", "-table", "t", "-addr", "0.0.0.0:0")
	if code != 2 || !strings.Contains(errOut, "-public") || !strings.Contains(errOut, "not loopback") {
		t.Fatalf("console on 0.0.0.0: exit %d, %q; want a usage error naming -public", code, errOut)
	}
}

// memConsole is a console over an in-memory store holding one dead
// letter, and its key.
func memConsole(t *testing.T, actions bool) (*httptest.Server, *memstore.Store, string, *console) {
	t.Helper()
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	key := mustKey(t, "onceq", "order-1")
	now := time.Now()
	c, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: key, Owner: "w", PayloadHash: "h", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Fail(t.Context(), dedup.FailRequest{Lease: c.Lease, Reason: "poison", Now: now, RetryAt: now.Add(time.Hour), DeadLetter: true}); err != nil {
		t.Fatal(err)
	}
	log := &testenv.LogBuffer{}
	con, err := newConsole(&inspected{Inspector: st, caps: st.Capabilities(), where: "memory", close: func() {}},
		consoleConfig{namespace: "onceq", pageSize: 50, since: time.Hour, scanLimit: 100}, actions, log.Logger(0))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(con.handler())
	t.Cleanup(srv.Close)
	return srv, st, key, con
}

// post sends the forget form with the given headers set.
func post(t *testing.T, srv *httptest.Server, form url.Values, headers map[string]string) (int, string) {
	t.Helper()
	return postTo(t, srv, "/forget", form, headers)
}

// postTo sends form to the console's path with the given headers set
// (Host: the request's host).
func postTo(t *testing.T, srv *httptest.Server, path string, form url.Values, headers map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// A forget is refused from another site (by Sec-Fetch-Site or Origin),
// without this console's token, at a version the record has left, and
// by a read-only console; the record is kept each time. Only the
// confirmed form of this console deletes it.
func TestConsoleForgetGuarded(t *testing.T) {
	srv, st, key, con := memConsole(t, true)
	form := url.Values{"stored_key": {key}, "version": {"2"}, "token": {con.token}}
	kept := func(what string) {
		t.Helper()
		if _, err := st.Get(t.Context(), key); err != nil {
			t.Fatalf("%s: the record is gone (%v)", what, err)
		}
	}
	for _, c := range []struct {
		what    string
		form    url.Values
		headers map[string]string
		status  int
	}{
		{"a cross-site form", form, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"another origin", form, map[string]string{"Origin": "http://console.example"}, http.StatusForbidden},
		{"no token", url.Values{"stored_key": {key}, "version": {"2"}}, map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusForbidden},
		{"another token", url.Values{"stored_key": {key}, "version": {"2"}, "token": {strings.Repeat("0", 64)}}, nil, http.StatusForbidden},
		{"a name other than an address", form, map[string]string{"Host": "rebound.example"}, http.StatusMisdirectedRequest},
		{"a version the record left", url.Values{"stored_key": {key}, "version": {"1"}, "token": {con.token}}, nil, http.StatusConflict},
	} {
		if status, body := post(t, srv, c.form, c.headers); status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.what, status, c.status, body)
		}
		kept(c.what)
	}
	status, body := post(t, srv, form, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": srv.URL})
	if status != http.StatusOK || !strings.Contains(body, "was forgotten") {
		t.Fatalf("the console's own form: status %d: %s", status, body)
	}
	if _, err := st.Get(t.Context(), key); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("after the forget: %v, want ErrNotFound", err)
	}

	// A redrive is guarded alike (the in-memory store keeps an outbox).
	if con.redrive == nil {
		t.Fatal("no redrive over the in-memory store")
	}
	redrive := url.Values{"stored_key": {key}, "token": {con.token}}
	req := func(form url.Values, headers map[string]string) int {
		t.Helper()
		r, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/redrive", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range headers {
			r.Header.Set(k, v)
		}
		res, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if status := req(redrive, map[string]string{"Sec-Fetch-Site": "cross-site"}); status != http.StatusForbidden {
		t.Errorf("a cross-site redrive: status %d, want 403", status)
	}
	if status := req(url.Values{"stored_key": {key}}, nil); status != http.StatusForbidden {
		t.Errorf("a redrive without the token: status %d, want 403", status)
	}

	ro, st, key, con := memConsole(t, false)
	status, body = post(t, ro, url.Values{"stored_key": {key}, "version": {"2"}, "token": {con.token}}, nil)
	if status != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Errorf("a read-only console's forget: status %d: %s", status, body)
	}
	if _, err := st.Get(t.Context(), key); err != nil {
		t.Fatalf("a read-only console forgot the record: %v", err)
	}
	res, err := ro.Client().Get(ro.URL + "/message?stored_key=" + url.QueryEscape(key))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if strings.Contains(string(b), `id="forget"`) || !strings.Contains(string(b), "poison") {
		t.Errorf("a read-only console's record page offers forget, or misses the record: %s", b)
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q, want default-src 'none'", csp)
	}
}

// A listing by tenant shows that tenant's records alone, where the
// store lists by tenant.
func TestConsoleListsByTenant(t *testing.T) {
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tenant := range []string{"acme", "globex"} {
		key, err := dedup.TenantKey(tenant, mustKey(t, "onceq", "order-of-"+tenant))
		if err != nil {
			t.Fatal(err)
		}
		c, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: key, Owner: "w", PayloadHash: "h", Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Fail(t.Context(), dedup.FailRequest{Lease: c.Lease, Reason: "poison", Now: now, RetryAt: now.Add(time.Hour), DeadLetter: true}); err != nil {
			t.Fatal(err)
		}
	}
	con, err := newConsole(&inspected{Inspector: st, caps: st.Capabilities(), where: "memory", close: func() {}},
		consoleConfig{namespace: "onceq", pageSize: 50, since: time.Hour, scanLimit: 100, tenants: true}, false, (&testenv.LogBuffer{}).Logger(0))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(con.handler())
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL + "/records?status=DEAD_LETTER&tenant=acme")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if page := string(b); !strings.Contains(page, "order-of-acme") || strings.Contains(page, "order-of-globex") || !strings.Contains(page, `name="tenant"`) {
		t.Fatalf("tenant acme's dead letters: %s", page)
	}
}
