package httpidem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/idempotency"
)

// The header fields the middleware reads and writes.
const (
	// HeaderKey is the request's idempotency key.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed marks a stored response given again.
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderExpiry states the expiry policy, in seconds (ExpiryHeader).
	HeaderExpiry = "Idempotency-Key-Expiry"
)

// Middleware makes a handler idempotent per Idempotency-Key. Build it with
// New; it is safe for concurrent use.
type Middleware struct {
	run     *idempotency.Runner
	cfg     config
	methods map[string]bool
	expiry  string
	// rejected is stored instead of the handler's response when a
	// business write's own condition refuses the commit.
	rejected []byte
	// oversizeAllow is the allowlist with Content-Type, for what is
	// stored in place of a response over the limit; minResponse is the
	// longest that can be.
	oversizeAllow []string
	minResponse   int
	// storeMax is the Store's own bound on a response, once a Complete
	// refused one for it (0 before): when it is below MaxResponseBytes,
	// the next run of the key stores in short rather than fail again.
	storeMax atomic.Int64
}

// New returns a Middleware over run: its Store keeps the responses, its
// options say how long (Retention), how long a dead server's request
// holds its key (InProgressExpiry), and whether a retry waits for the
// request in flight (Wait) or gets 409.
func New(run *idempotency.Runner, opts ...Option) (*Middleware, error) {
	if run == nil {
		return nil, fmt.Errorf("httpidem: %w: a Runner is required", consumer.ErrInvalidConfig)
	}
	cfg := config{methods: defaultMethods, allow: []string{"Content-Type", "Location"},
		fingerprint: DefaultFingerprint, maxBody: DefaultMaxBodyBytes, maxResponse: DefaultMaxResponseBytes,
		docs: "about:blank", scope: DefaultScope}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if cfg.fingerprint == nil || cfg.scope == nil || cfg.maxBody <= 0 {
		return nil, fmt.Errorf("httpidem: %w: Fingerprint and Scope must not be nil (Unscoped shares keys between callers), MaxBodyBytes must be positive", consumer.ErrInvalidConfig)
	}
	m := &Middleware{run: run, cfg: cfg, methods: map[string]bool{}}
	for _, meth := range cfg.methods {
		m.methods[strings.ToUpper(meth)] = true
	}
	allow := make([]string, len(cfg.allow))
	for i, name := range cfg.allow {
		allow[i] = http.CanonicalHeaderKey(name)
	}
	m.cfg.allow = allow
	m.oversizeAllow = allow
	if !slices.Contains(allow, "Content-Type") {
		m.oversizeAllow = append([]string{"Content-Type"}, allow...)
	}
	// The longest stand-in: the longest status title, the longest sizes.
	m.minResponse = len(m.oversize(http.StatusNetworkAuthenticationRequired, nil, math.MaxInt, math.MaxInt)) + 16
	if cfg.maxResponse < m.minResponse {
		return nil, fmt.Errorf("httpidem: %w: MaxResponseBytes(%d): must hold at least the %d bytes of the problem stored in place of a longer response",
			consumer.ErrInvalidConfig, cfg.maxResponse, m.minResponse)
	}
	m.expiry = strconv.FormatInt(int64(run.Retention()/time.Second), 10)
	m.rejected = encode(http.StatusConflict, http.Header{"Content-Type": {"application/problem+json"}}, allow,
		problemBody(m.problem(http.StatusConflict, "a business condition refused the request's writes; nothing was written")))
	return m, nil
}

// Wrap returns next behind the middleware.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

// unstored is a response the middleware sends without storing it (a 5xx,
// or a status that asks for a retry later): the run fails, so the key is
// freed and the handler's writes do not commit.
type unstored struct{ rec *recorder }

func (e *unstored) Error() string {
	return fmt.Sprintf("httpidem: the handler answered %d, which is not stored", e.rec.status)
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !m.methods[r.Method] {
		next.ServeHTTP(w, r)
		return
	}
	key, err := parseKey(r.Header.Values(HeaderKey))
	if err != nil {
		m.writeProblem(w, http.StatusBadRequest, err.Error(), 0)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.cfg.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			m.writeProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body exceeds %d bytes", m.cfg.maxBody), 0)
			return
		}
		m.writeProblem(w, http.StatusBadRequest, "the request body could not be read", 0)
		return
	}
	var first *recorder
	res, err := m.run.Do(r.Context(), m.storedKey(r, key), m.cfg.fingerprint(r, body), func(ctx context.Context, tx *idempotency.Tx) ([]byte, error) {
		rec := &recorder{header: make(http.Header), status: http.StatusOK}
		first = rec
		req := r.WithContext(context.WithValue(ctx, txKey{}, tx))
		req.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(rec, req)
		rec.finish()
		if err := ctx.Err(); err != nil && !rec.wrote {
			// It gave up when its client went away (or at its timeout),
			// and answered nothing: not an empty 200 to replay.
			return nil, err
		}
		if (rec.status >= 500 && !m.cfg.storeServer) || retryLater(rec.status) {
			return nil, &unstored{rec}
		}
		// Stored instead when a business write's own condition refuses the
		// commit: the handler's answer assumed its writes.
		_ = tx.OnRejected(m.rejected)
		resp := encode(rec.status, rec.header, m.cfg.allow, rec.body.Bytes())
		if limit := m.maxResponse(); len(resp) > limit {
			// Its writes commit: the client gets this answer now and a
			// retry a problem that says the request was done, so the
			// handler never runs again for the key.
			resp = m.oversize(rec.status, rec.header, len(resp), limit)
		}
		return resp, nil
	})
	if err != nil {
		m.failed(w, err)
		return
	}
	if !res.Replayed && !res.Rejected && first != nil {
		m.send(w, first.status, first.header, first.body.Bytes(), first.trailer, false, true)
		return
	}
	h := make(http.Header)
	status, stored, derr := decode(res.Response, h)
	if derr != nil {
		m.writeProblem(w, http.StatusInternalServerError, "the response stored for this key cannot be read", 0)
		return
	}
	m.send(w, status, h, stored, nil, res.Replayed, true)
}

// retryLater says whether status asks the client to send the same
// request again later. That is "not now", not what became of the request:
// stored, it would be replayed to that retry for the whole Retention, so
// it is not, even with StoreServerErrors, and its writes do not commit.
func retryLater(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	}
	return false
}

// storedKey is the key the Runner keeps for the request: the hash of its
// scope (never the credential itself), then the client's key.
func (m *Middleware) storedKey(r *http.Request, key string) string {
	sum := sha256.Sum256([]byte(m.cfg.scope(r)))
	return hex.EncodeToString(sum[:16]) + ":" + key
}

// maxResponse is the longest response stored: MaxResponseBytes, or the
// Store's bound once it refused a longer one.
func (m *Middleware) maxResponse() int {
	if s := m.storeMax.Load(); s > 0 && s < int64(m.cfg.maxResponse) {
		return int(s)
	}
	return m.cfg.maxResponse
}

// oversize is what is stored in place of a response of size bytes, over
// limit: its status and replayed header fields (without them if they do
// not fit) and a problem details body that names the limit. The status
// stays the handler's: the request was done, and an error status would
// invite the client to do it again under a new key.
func (m *Middleware) oversize(status int, h http.Header, size, limit int) []byte {
	body := problemBody(m.problem(status, fmt.Sprintf("this request was done and its writes committed, but its response of %d bytes is longer "+
		"than the %d bytes kept for a replay, so only its status and header fields are given again; do not send it again under a new key", size, limit)))
	fields := make(http.Header, len(m.oversizeAllow))
	for _, name := range m.oversizeAllow {
		if v := h[name]; len(v) > 0 && !representation(name) {
			fields[name] = v
		}
	}
	fields.Set("Content-Type", "application/problem+json")
	if b := encode(status, fields, m.oversizeAllow, body); len(b) <= limit {
		return b
	}
	return encode(status, http.Header{"Content-Type": {"application/problem+json"}}, []string{"Content-Type"}, body)
}

// representation names the header fields that describe a response's
// body, not its outcome: they do not come with the problem stored in
// place of a body over the limit, which they would misdescribe.
func representation(name string) bool {
	switch name {
	case "Content-Encoding", "Content-Length", "Content-Range", "Content-Language", "Content-Md5",
		"Content-Digest", "Repr-Digest", "Digest", "Etag":
		return true
	}
	return false
}

// send writes a response, the first one or a stored one; stored says
// whether it is kept under the key (and so has the expiry policy).
// trailer is the first response's trailer fields (a stored one has none).
func (m *Middleware) send(w http.ResponseWriter, status int, h http.Header, body []byte, trailer http.Header, replayed, stored bool) {
	dst := w.Header()
	for k, v := range h {
		dst[k] = v
	}
	if replayed {
		dst.Set(HeaderReplayed, "true")
	}
	if stored && m.cfg.expiryHeader {
		dst.Set(HeaderExpiry, m.expiry)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
	// Set after the body, as net/http takes them: declared in the
	// header's Trailer field, or named with http.TrailerPrefix.
	for k, v := range trailer {
		dst[k] = v
	}
}

// failed answers a request whose call stored nothing.
func (m *Middleware) failed(w http.ResponseWriter, err error) {
	var (
		un   *unstored
		busy *idempotency.InProgressError
		outg *idempotency.StoreError
		big  *dedup.ResponseTooLargeError
	)
	switch {
	case errors.As(err, &un):
		m.send(w, un.rec.status, un.rec.header, un.rec.body.Bytes(), un.rec.trailer, false, false)
	case errors.Is(err, idempotency.ErrKeyReuse):
		m.writeProblem(w, http.StatusUnprocessableEntity, "the Idempotency-Key was used before with another request; use a new key for a new request", 0)
	case errors.As(err, &busy):
		m.writeProblem(w, http.StatusConflict, "a request with this Idempotency-Key is still being processed; retry later", busy.RetryAfter)
	case errors.As(err, &outg):
		m.writeProblem(w, http.StatusServiceUnavailable, "the idempotency store is unavailable; nothing was done, retry later", outg.RetryAfter)
	case errors.As(err, &big) && big.Max >= m.minResponse:
		// The Store keeps less than MaxResponseBytes: nothing committed.
		// Its bound is kept, so the retry stores a stand-in that fits.
		m.storeMax.Store(int64(big.Max))
		m.writeProblem(w, http.StatusServiceUnavailable, fmt.Sprintf("the response was longer than the %d bytes the idempotency store keeps; "+
			"nothing was stored, retry", big.Max), time.Second)
	case errors.As(err, &big):
		m.writeProblem(w, http.StatusInternalServerError, fmt.Sprintf("the idempotency store keeps responses of at most %d bytes, "+
			"too few for this server's answers; nothing was stored", big.Max), 0)
	case errors.Is(err, dedup.ErrKeyTooLong), errors.Is(err, dedup.ErrEmptyKey):
		m.writeProblem(w, http.StatusBadRequest, "the Idempotency-Key is not one this server can keep", 0)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		m.writeProblem(w, http.StatusServiceUnavailable, "the request ended before it was done; nothing was stored, retry", time.Second)
	default:
		m.writeProblem(w, http.StatusInternalServerError, "the request failed; nothing was stored, a retry runs it again", 0)
	}
}

// recorder holds the handler's response until it is stored.
type recorder struct {
	// header is the handler's; sent is a copy of it taken when the
	// status was written (WriteHeader or the first Write): as in
	// net/http, a field changed after that is not part of the response.
	header  http.Header
	sent    http.Header
	trailer http.Header // set by finish
	status  int
	body    bytes.Buffer
	wrote   bool
}

// finish makes header the response's (the copy taken with the status,
// if the handler wrote one) and takes its trailer fields from the
// handler's header as it was left, as net/http does.
func (r *recorder) finish() {
	if r.sent == nil {
		return // nothing written: the header as left is the response's
	}
	live := r.header
	r.header = r.sent
	for _, list := range r.sent["Trailer"] {
		for name := range strings.SplitSeq(list, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			if v, ok := live[name]; ok && name != "" {
				r.addTrailer(name, v)
			}
		}
	}
	for k, v := range live {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			r.addTrailer(k, v)
		}
	}
}

func (r *recorder) addTrailer(name string, v []string) {
	if r.trailer == nil {
		r.trailer = make(http.Header)
	}
	r.trailer[name] = v
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	// As net/http: a code it would refuse is the handler's fault (a panic,
	// so nothing is stored), and an informational response (103 Early
	// Hints) is not the answer; only the final status is kept.
	if status < 100 || status > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", status))
	}
	if status < 200 && status != http.StatusSwitchingProtocols {
		return
	}
	if !r.wrote {
		r.status, r.wrote = status, true
		r.sent = r.header.Clone()
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	return r.body.Write(b)
}

type txKey struct{}

// Tx is the idempotency.Tx of the request's run: the handler hands its
// business writes over with Tx(r).Write, to commit with its response. Nil
// for a request the middleware does not run under a key (a GET, say),
// whose Write then returns idempotency.ErrNotInCall.
func Tx(r *http.Request) *idempotency.Tx {
	tx, _ := r.Context().Value(txKey{}).(*idempotency.Tx)
	return tx
}
