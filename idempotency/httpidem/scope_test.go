package httpidem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/idempotency"
	"github.com/onceq/onceq/idempotency/httpidem"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// keysSeen is a Store that records the keys it is asked to claim.
type keysSeen struct {
	dedup.Store
	mu   sync.Mutex
	keys []string
}

func (k *keysSeen) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	k.mu.Lock()
	k.keys = append(k.keys, req.Key)
	k.mu.Unlock()
	return k.Store.Claim(ctx, req)
}

// serve runs the middleware over st with opts in front of h on a real
// server, and returns a client call: POST /orders with the header fields
// given in pairs.
func serve(t *testing.T, st dedup.Store, h http.HandlerFunc, opts ...httpidem.Option) func(body string, fields ...string) (*http.Response, string) {
	t.Helper()
	run, err := idempotency.New(st)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpidem.New(run, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Wrap(h))
	t.Cleanup(srv.Close)
	t.Cleanup(srv.Client().CloseIdleConnections)
	return func(body string, fields ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
		for i := 0; i+1 < len(fields); i += 2 {
			req.Header.Set(fields[i], fields[i+1])
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		return res, string(b)
	}
}

// The caller's scope is in the stored key as a hash: two credentials give
// two keys, and neither credential is stored in clear.
func TestStoredKeyHidesCredential(t *testing.T) {
	st := &keysSeen{Store: memstoretest.New(t)}
	post := serve(t, st, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	for _, auth := range []string{"Bearer alice-s3cret", "Bearer bob-s3cret"} {
		if res, body := post("{}", httpidem.HeaderKey, `"order-1"`, "Authorization", auth); res.StatusCode != http.StatusCreated {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
	}
	if len(st.keys) != 2 || st.keys[0] == st.keys[1] {
		t.Fatalf("stored keys %q: want one per caller", st.keys)
	}
	for _, k := range st.keys {
		if strings.Contains(k, "s3cret") || !strings.HasSuffix(k, "order-1") {
			t.Errorf("stored key %q: want the client's key after a hash of the scope, no credential", k)
		}
	}
}

// A Scope of the application's own (the account its authentication
// resolved) decides whose a key is, whatever the credential.
func TestScopeOption(t *testing.T) {
	var runs atomic.Int32
	post := serve(t, memstoretest.New(t), func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprint(w, runs.Add(1))
	}, httpidem.Scope(func(r *http.Request) string { return r.Header.Get("X-Account") }))
	for _, c := range []struct{ account, auth, want string }{
		{"acct-1", "Bearer old-token", "1"}, {"acct-1", "Bearer refreshed-token", "1"}, {"acct-2", "Bearer old-token", "2"},
	} {
		if _, body := post("{}", httpidem.HeaderKey, `"k"`, "X-Account", c.account, "Authorization", c.auth); body != c.want {
			t.Errorf("account %s with %s: run %s, want %s", c.account, c.auth, body, c.want)
		}
	}
}

// A Store that keeps less than MaxResponseBytes refuses the first long
// response (nothing committed, 503); the middleware then keeps to the
// Store's bound, so the retry commits and a retry after it replays: the
// handler's writes apply once, and it never runs again after they did.
func TestStoreLimitBelowMaxResponseBytes(t *testing.T) {
	var runs, applied atomic.Int32
	post := serve(t, memstoretest.New(t, memstore.MaxResponseSize(4096)), func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		_ = httpidem.Tx(r).Write(memstore.Write{Apply: func() { applied.Add(1) }})
		w.Header().Set("Location", "/orders/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(strings.Repeat("x", 10_000)))
	})
	res, body := post("{}", httpidem.HeaderKey, `"big"`)
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "4096 bytes") || applied.Load() != 0 {
		t.Fatalf("first: %d %s, applied %d: want 503 naming the store's bound, nothing applied", res.StatusCode, body, applied.Load())
	}
	res, body = post("{}", httpidem.HeaderKey, `"big"`)
	if res.StatusCode != http.StatusCreated || len(body) != 10_000 || applied.Load() != 1 {
		t.Fatalf("retry: %d, %d bytes, applied %d: want the whole 201, applied once", res.StatusCode, len(body), applied.Load())
	}
	for range 3 {
		res, body = post("{}", httpidem.HeaderKey, `"big"`)
		if res.StatusCode != http.StatusCreated || res.Header.Get(httpidem.HeaderReplayed) != "true" ||
			res.Header.Get("Location") != "/orders/1" || !strings.Contains(body, "4096 bytes") {
			t.Fatalf("replay: %d %v %s: want the stored 201 with a problem naming the bound", res.StatusCode, res.Header, body)
		}
	}
	if runs.Load() != 2 || applied.Load() != 1 {
		t.Errorf("the handler ran %d times, its writes applied %d: want 2 and 1", runs.Load(), applied.Load())
	}
}

// Options that would break the guarantees are refused when the
// middleware is built.
func TestNewRefusesBadOptions(t *testing.T) {
	run, err := idempotency.New(memstoretest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]httpidem.Option{
		"Scope(nil)":            httpidem.Scope(nil),
		"Fingerprint(nil)":      httpidem.Fingerprint(nil),
		"MaxBodyBytes(0)":       httpidem.MaxBodyBytes(0),
		"MaxResponseBytes(100)": httpidem.MaxResponseBytes(100),
	} {
		if _, err := httpidem.New(run, opt); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}
