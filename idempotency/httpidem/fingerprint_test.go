package httpidem_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/onceq/onceq/idempotency/httpidem"
)

// serverRequest is a request as a server reads it: target as received.
func serverRequest(method, target string) *http.Request {
	return &http.Request{Method: method, RequestURI: target, URL: &url.URL{}, Header: http.Header{}}
}

// Requests that differ in their query, or whose fields would join into
// the same bytes, have different fingerprints.
func TestDefaultFingerprintUnambiguous(t *testing.T) {
	for _, c := range []struct {
		m1, t1, b1, m2, t2, b2 string
	}{
		{"POST", "/transfer?to=alice", "{}", "POST", "/transfer?to=bob", "{}"},
		{"POST", "/transfer", "{}", "POST", "/transfer?", "{}"},
		{"POST", "/a%00b", "c", "POST", "/a", "b\x00c"},
		{"POST", "/a\x00b", "c", "POST", "/a", "b\x00c"},
		{"POST\x00/a", "", "", "POST", "/a", ""},
		{"POST", "/ab", "", "POST", "/a", "b"},
	} {
		f1 := httpidem.DefaultFingerprint(serverRequest(c.m1, c.t1), []byte(c.b1))
		f2 := httpidem.DefaultFingerprint(serverRequest(c.m2, c.t2), []byte(c.b2))
		if bytes.Equal(f1, f2) {
			t.Errorf("%q %q %q and %q %q %q share a fingerprint", c.m1, c.t1, c.b1, c.m2, c.t2, c.b2)
		}
	}
	// A request built by a client, as in a test calling the handler, has
	// no RequestURI: its URL gives the target, query included.
	a := httptest.NewRequest(http.MethodPost, "/transfer?to=alice", nil)
	b := httptest.NewRequest(http.MethodPost, "/transfer?to=bob", nil)
	a.RequestURI, b.RequestURI = "", ""
	if bytes.Equal(httpidem.DefaultFingerprint(a, nil), httpidem.DefaultFingerprint(b, nil)) {
		t.Error("the query is not in the fingerprint of a request without RequestURI")
	}
}

// A target in absolute form (as through a forward proxy) has the
// fingerprint of its origin form, path and query as received; another
// path or query is still another request.
func TestDefaultFingerprintAbsoluteForm(t *testing.T) {
	parsed := func(target string) *http.Request {
		u, err := url.ParseRequestURI(target) // as a server reads it
		if err != nil {
			t.Fatal(err)
		}
		return &http.Request{Method: http.MethodPost, RequestURI: target, URL: u, Host: u.Host, Header: http.Header{}}
	}
	for _, c := range []struct {
		abs, origin string
		same        bool
	}{
		{"http://example.com/transfer?to=a", "/transfer?to=a", true},
		{"https://Example.com:8443/transfer?to=a", "/transfer?to=a", true},
		{"http://example.com/a%2Fb?q=%20", "/a%2Fb?q=%20", true},
		{"http://example.com/a%41", "/a%41", true},
		{"http://example.com", "/", true},
		{"http://example.com/transfer?", "/transfer?", true},
		{"http://example.com/transfer?to=a", "/transfer?to=b", false},
		{"http://example.com/transfer", "/transfer?", false},
		{"http://example.com/a%2Fb", "/a/b", false},
		{"http://example.com/a%41", "/aA", false},
	} {
		f1 := httpidem.DefaultFingerprint(parsed(c.abs), []byte("{}"))
		f2 := httpidem.DefaultFingerprint(parsed(c.origin), []byte("{}"))
		if bytes.Equal(f1, f2) != c.same {
			t.Errorf("%q and %q: same fingerprint %v, want %v", c.abs, c.origin, !c.same, c.same)
		}
	}
}

// Two different requests (method, target, body) never share a
// fingerprint; the same request always has the same.
func FuzzFingerprint(f *testing.F) {
	f.Add("POST", "/transfer?to=alice", []byte("{}"), "POST", "/transfer?to=bob", []byte("{}"))
	f.Add("POST", "/a%00b", []byte("c"), "POST", "/a", []byte("b\x00c"))
	f.Add("POST", "/a", []byte{}, "POST", "/a", []byte{})
	f.Add("PATCH", "/x", []byte("\x01\x02"), "PATCH\x01", "\x02/x", []byte{})
	f.Fuzz(func(t *testing.T, m1, t1 string, b1 []byte, m2, t2 string, b2 []byte) {
		if t1 == "" || t2 == "" {
			t.Skip("a server never reads an empty request target")
		}
		f1 := httpidem.DefaultFingerprint(serverRequest(m1, t1), b1)
		f2 := httpidem.DefaultFingerprint(serverRequest(m2, t2), b2)
		same := m1 == m2 && t1 == t2 && bytes.Equal(b1, b2)
		if bytes.Equal(f1, f2) != same {
			t.Errorf("%q %q %q and %q %q %q: fingerprints equal %v, requests equal %v", m1, t1, b1, m2, t2, b2, !same, same)
		}
		if again := httpidem.DefaultFingerprint(serverRequest(m1, t1), b1); !bytes.Equal(f1, again) {
			t.Error("one request, two fingerprints")
		}
	})
}
