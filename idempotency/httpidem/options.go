package httpidem

import (
	"net/http"
)

// Option configures a Middleware (New).
type Option func(*config)

type config struct {
	methods      []string
	allow        []string
	storeServer  bool
	fingerprint  FingerprintFunc
	maxBody      int64
	docs         string
	expiryHeader bool
}

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
func Methods(methods ...string) Option { return func(c *config) { c.methods = methods } }

// ReplayHeaders sets the response header fields stored and replayed
// (default Content-Type and Location). Others are sent with the first
// response only: a Set-Cookie or a Date should not be replayed.
func ReplayHeaders(names ...string) Option { return func(c *config) { c.allow = names } }

// StoreServerErrors stores 5xx responses too, and replays them, as
// Stripe does: the handler then never runs twice for a key, even after it
// failed. Without it a 5xx is sent as it is, nothing is stored, and a
// retry runs the handler again.
func StoreServerErrors() Option { return func(c *config) { c.storeServer = true } }

// Fingerprint sets what a retry must match (default: the method, the
// path and the body, see DefaultFingerprint).
func Fingerprint(f FingerprintFunc) Option { return func(c *config) { c.fingerprint = f } }

// MaxBodyBytes bounds the request body read for the fingerprint (default
// DefaultMaxBodyBytes); a longer one is refused with 413.
func MaxBodyBytes(n int64) Option { return func(c *config) { c.maxBody = n } }

// ProblemType sets the "type" of the problem details bodies, a link to
// the documentation of the endpoint's idempotency (default
// "about:blank").
func ProblemType(uri string) Option { return func(c *config) { c.docs = uri } }

// ExpiryHeader sends the expiry policy with every stored or replayed
// response, as "Idempotency-Key-Expiry: <seconds>", the Runner's
// Retention: how long a retry with the key gets the stored answer.
func ExpiryHeader() Option { return func(c *config) { c.expiryHeader = true } }

// DefaultFingerprint is the method, the path and the body, separated by
// zero bytes.
func DefaultFingerprint(r *http.Request, body []byte) []byte {
	b := make([]byte, 0, len(r.Method)+len(r.URL.Path)+len(body)+2)
	b = append(append(b, r.Method...), 0)
	b = append(append(b, r.URL.Path...), 0)
	return append(b, body...)
}
