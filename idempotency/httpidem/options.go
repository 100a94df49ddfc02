package httpidem

import (
	"encoding/binary"
	"net/http"

	"github.com/onceq/onceq/dedup"
)

// Option configures a Middleware (New).
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	methods      []string
	allow        []string
	storeServer  bool
	fingerprint  FingerprintFunc
	maxBody      int64
	maxResponse  int
	docs         string
	expiryHeader bool
	scope        ScopeFunc
}

// ScopeFunc gives the caller a request comes from (an account, a tenant,
// a credential): keys are the caller's own. Two requests with one
// Idempotency-Key and different scopes are two keys, each run once; the
// scope is kept in the stored key only as a hash.
type ScopeFunc func(r *http.Request) string

// FingerprintFunc gives what a retry must match under the same key: two
// requests with one key and different fingerprints are a key reused (422).
// body is the request's whole body, read once by the middleware.
type FingerprintFunc func(r *http.Request, body []byte) []byte

// DefaultMethods are the methods that require an Idempotency-Key unless
// Methods says otherwise.
var defaultMethods = []string{http.MethodPost, http.MethodPatch}

// DefaultMaxBodyBytes is MaxBodyBytes' default.
const DefaultMaxBodyBytes = 1 << 20

// Methods sets the methods that require an Idempotency-Key (default POST
// and PATCH). Requests with other methods pass through untouched.
func Methods(methods ...string) Option { return optionFunc(func(c *config) { c.methods = methods }) }

// ReplayHeaders sets the response header fields stored and replayed
// (default Content-Type and Location). Others are sent with the first
// response only: a Set-Cookie or a Date should not be replayed.
func ReplayHeaders(names ...string) Option { return optionFunc(func(c *config) { c.allow = names }) }

// StoreServerErrors stores 5xx responses too, and replays them, as
// Stripe does: the handler then never runs twice for a key, even after it
// failed. Without it a 5xx is sent as it is, nothing is stored, and a
// retry runs the handler again. A 503 (like a 408, 425 or 429) asks the
// client to retry later, so it is never stored.
func StoreServerErrors() Option { return optionFunc(func(c *config) { c.storeServer = true }) }

// Fingerprint sets what a retry must match (default: the method, the
// request target with its query, and the body, see DefaultFingerprint).
func Fingerprint(f FingerprintFunc) Option { return optionFunc(func(c *config) { c.fingerprint = f }) }

// MaxBodyBytes bounds the request body read for the fingerprint (default
// DefaultMaxBodyBytes); a longer one is refused with 413.
func MaxBodyBytes(n int64) Option { return optionFunc(func(c *config) { c.maxBody = n }) }

// DefaultMaxResponseBytes is MaxResponseBytes' default: the Stores'
// default MaxResponseSize (256 KiB).
const DefaultMaxResponseBytes = dedup.DefaultMaxResponseSize

// MaxResponseBytes bounds a stored response, counted as it is stored (its
// status, its replayed header fields and its body; default
// DefaultMaxResponseBytes). Set it no higher than the Store's
// MaxResponseSize. A longer response is sent whole to the request that
// ran the handler and its writes commit, but what is stored and replayed
// in its place is its status and replayed header fields with a problem
// details body that names the limit: the handler never runs again for
// the key.
func MaxResponseBytes(n int) Option { return optionFunc(func(c *config) { c.maxResponse = n }) }

// Scope sets whose keys a request's are (default DefaultScope: the
// Authorization header field). An endpoint behind its own authentication
// gives the account or tenant it resolved, which holds across a
// client's token refreshes.
func Scope(f ScopeFunc) Option { return optionFunc(func(c *config) { c.scope = f }) }

// Unscoped shares keys between every caller: a stored response is
// replayed to any request with its key, whatever its credentials. Only
// for an endpoint with no callers to tell apart.
func Unscoped() Option { return optionFunc(func(c *config) { c.scope = unscoped }) }

func unscoped(*http.Request) string { return "" }

// DefaultScope is the request's Authorization header field values, so
// that no stored response is replayed to a request with other
// credentials (or none). Only a hash of it is stored.
func DefaultScope(r *http.Request) string {
	v := r.Header.Values("Authorization")
	b := binary.AppendUvarint(nil, uint64(len(v)))
	for _, s := range v {
		b = appendField(b, s)
	}
	return string(b)
}

// ProblemType sets the "type" of the problem details bodies, a link to
// the documentation of the endpoint's idempotency (default
// "about:blank").
func ProblemType(uri string) Option { return optionFunc(func(c *config) { c.docs = uri }) }

// ExpiryHeader sends the expiry policy with every stored or replayed
// response, as "Idempotency-Key-Expiry: <seconds>", the Runner's
// Retention: how long a retry with the key gets the stored answer.
func ExpiryHeader() Option { return optionFunc(func(c *config) { c.expiryHeader = true }) }

// DefaultFingerprint is the method, the request target in origin form
// (path and query, as the request gave them) and the body, each after its
// length, so that no two different requests share one. The Host is not
// in it: a retry sent under another name of the same server, or in
// absolute form through a forward proxy ("POST http://host/path"), is the
// same request. A server that serves several virtual hosts behind one
// Middleware adds r.Host to its Scope.
func DefaultFingerprint(r *http.Request, body []byte) []byte {
	target := r.RequestURI // as received, on a server
	switch {
	case target == "":
		target = r.URL.RequestURI()
	case target[0] != '/' && r.URL != nil && r.URL.Host != "":
		// Absolute form: its path and query as received (the escaped
		// path is RawPath when that is how it came), without the scheme
		// and authority, as the origin form of the same URI.
		target = r.URL.RequestURI()
	}
	b := make([]byte, 0, 3*binary.MaxVarintLen64+len(r.Method)+len(target)+len(body))
	b = appendField(b, r.Method)
	b = appendField(b, target)
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
}

// appendField appends s after its length.
func appendField(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}
