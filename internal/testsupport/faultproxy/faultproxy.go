package faultproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Fault is what the proxy does to a request instead of (or after)
// forwarding it.
type Fault int

const (
	// None forwards the request untouched.
	None Fault = iota
	// Throttle answers HTTP 400 ProvisionedThroughputExceededException.
	Throttle
	// ThrottlingException answers HTTP 400 ThrottlingException.
	ThrottlingException
	// InternalError answers HTTP 500 InternalServerError.
	InternalError
	// Reset closes the client's connection abruptly (TCP RST), no answer.
	Reset
	// Latency forwards the request after Rule.Delay.
	Latency
	// Cancel answers HTTP 400 TransactionCanceledException with
	// Rule.Reasons as its CancellationReasons (e.g. "None",
	// "TransactionConflict"), for TransactWriteItems.
	Cancel
	// AccessDenied answers HTTP 400 AccessDeniedException, as DynamoDB does
	// for a caller whose IAM policy lacks the action on the table.
	AccessDenied
	// ResourceNotFound answers HTTP 400 ResourceNotFoundException, as
	// DynamoDB does for a table that does not exist (or not yet, or not
	// in this region).
	ResourceNotFound
	// Validation answers HTTP 400 ValidationException, as DynamoDB does
	// for a request it refuses as invalid (an expression it cannot parse,
	// a key of the wrong schema).
	Validation
	// Refuse answers HTTP 400 with the error code Rule.Code and message
	// Rule.Message, as a service refuses a request for what it holds (SQS
	// refusing a whole SendMessageBatch call for one entry's contents).
	// The code also goes in X-Amzn-Query-Error, as SQS sends it.
	Refuse
)

var faultNames = [...]string{"none", "throttle", "throttling_exception", "internal_error", "reset", "latency", "cancel",
	"access_denied", "resource_not_found", "validation", "refuse"}

func (f Fault) String() string {
	if f >= 0 && int(f) < len(faultNames) {
		return faultNames[f]
	}
	return fmt.Sprintf("fault(%d)", int(f))
}

// Rule says when to inject a Fault. Rules are tried in the order added; the
// first that fires decides the request.
type Rule struct {
	// Op is the operation to match, the X-Amz-Target after its '.'
	// ("UpdateItem"); empty matches every request.
	Op string
	// Table fires the rule only on requests that name this table: as
	// TableName, or in any of TransactItems or RequestItems. Empty
	// matches every request.
	Table string
	// Nth fires only on the Nth matching request (1-based); 0 on every one.
	Nth int
	// Times stops the rule after it fired this many times; 0 is no limit.
	Times int
	// Rate is the probability of firing on a matching request; 0 is 1.
	Rate float64
	// Fault is what to inject.
	Fault Fault
	// Delay is the added latency of a Latency fault.
	Delay time.Duration
	// Reasons are the cancellation reason codes of a Cancel fault, by
	// item index.
	Reasons []string
	// Body fires the rule only on requests whose body it accepts; nil
	// matches every request.
	Body func(body []byte) bool
	// Code and Message are the answer of a Refuse fault.
	Code, Message string
	// After forwards the request first and injects InternalError or Reset
	// in place of the real answer: the effect commits, the answer is
	// lost, the ambiguous failure a client must survive.
	After bool
}

type rule struct {
	Rule
	seen, fired int
}

// Stats counts what the proxy saw and did.
type Stats struct {
	Requests  int            // requests received
	Forwarded int            // requests sent on to the target
	ByOp      map[string]int // requests received, by operation
	Injected  map[Fault]int  // faults injected by rules, by kind
	// OverCapacity counts throttles answered by the capacity limit.
	OverCapacity int
	// OverPartitionCapacity counts throttles answered by the
	// per-partition-key limit (SetPartitionCapacity).
	OverPartitionCapacity int
}

// Option configures a Proxy.
type Option interface{ apply(*Proxy) }

type optionFunc func(*Proxy)

func (f optionFunc) apply(p *Proxy) { f(p) }

// WithSeed seeds the generator that Rule.Rate draws from (default 1).
func WithSeed(seed uint64) Option {
	return optionFunc(func(p *Proxy) { p.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) })
}

// WithCapacity starts the proxy with a request-rate ceiling (see SetCapacity).
func WithCapacity(perSecond int) Option {
	return optionFunc(func(p *Proxy) { p.setCapacity(perSecond, time.Now()) })
}

// Proxy is a running fault-injecting proxy. Its methods are safe for
// concurrent use.
type Proxy struct {
	target    *url.URL
	listener  net.Listener
	server    *http.Server
	transport *http.Transport
	served    chan struct{}
	handlers  sync.WaitGroup
	// done ends in-flight handlers at Close: a request's own context is not
	// cancelled when the server closes its connection mid-handler.
	done   context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	rng    *rand.Rand
	rules  []*rule
	stats  Stats
	closed bool
	// capacity mode: a token bucket of rate tokens/s, burst rate.
	rate   float64
	tokens float64
	last   time.Time
	// per-partition-key mode: a token bucket per (table, partition key).
	partAttr string
	partRate float64
	parts    map[string]*bucket

	closeOnce sync.Once
}

// New starts a proxy on 127.0.0.1 (a free port) in front of target, a base
// URL such as "http://127.0.0.1:8000". Close stops it.
func New(target string, opts ...Option) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("faultproxy: bad target %q", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{
		target:   u,
		listener: ln,
		transport: &http.Transport{
			Proxy:               nil, // never route loopback tests through an environment proxy
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     30 * time.Second,
		},
		served: make(chan struct{}),
		stats:  Stats{ByOp: map[string]int{}, Injected: map[Fault]int{}},
	}
	p.done, p.cancel = context.WithCancel(context.Background())
	WithSeed(1).apply(p)
	for _, o := range opts {
		if o != nil {
			o.apply(p)
		}
	}
	p.server = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(p.served)
		_ = p.server.Serve(ln) // ErrServerClosed once Close runs
	}()
	return p, nil
}

// Start is New for tests: it fails tb on error and closes the proxy in
// tb.Cleanup.
func Start(tb testing.TB, target string, opts ...Option) *Proxy {
	tb.Helper()
	p, err := New(target, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

// URL is the proxy's base URL, to use as the client's endpoint.
func (p *Proxy) URL() string { return "http://" + p.listener.Addr().String() }

// Close stops the proxy, drops its connections and waits for its
// goroutines. It may be called more than once.
func (p *Proxy) Close() {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cancel()
		_ = p.server.Close()
		<-p.served
		p.handlers.Wait()
		p.transport.CloseIdleConnections()
	})
}

// AddRule appends a rule.
func (p *Proxy) AddRule(r Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &rule{Rule: r})
}

// ClearRules removes every rule (the counters stay).
func (p *Proxy) ClearRules() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// SetCapacity makes the proxy answer Throttle to requests beyond perSecond
// (a token bucket with a burst of perSecond), like a provisioned table.
// Zero or less removes the ceiling.
func (p *Proxy) SetCapacity(perSecond int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setCapacity(perSecond, time.Now())
}

func (p *Proxy) setCapacity(perSecond int, now time.Time) {
	p.rate = float64(max(perSecond, 0))
	p.tokens = p.rate
	p.last = now
}

// bucket is one partition key's token bucket.
type bucket struct {
	tokens float64
	last   time.Time
}

// SetPartitionCapacity makes the proxy answer Throttle to requests beyond
// perSecond on any one partition key (a token bucket per table and value
// of the attribute attr, burst perSecond), as DynamoDB throttles a hot
// partition whatever the table's capacity. A request touching several
// items is throttled if any of their partitions is over. Zero or less
// removes the limit.
func (p *Proxy) SetPartitionCapacity(attr string, perSecond int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partAttr, p.partRate, p.parts = attr, float64(max(perSecond, 0)), map[string]*bucket{}
}

// partitions lists the (table, partition key) pairs a request body's
// items are on: Item or Key at the top (PutItem, UpdateItem, GetItem,
// DeleteItem) and in each TransactItems entry. The key value is the
// attribute's JSON as sent.
func partitions(body []byte, attr string) []string {
	type item struct {
		TableName string
		Item, Key map[string]json.RawMessage
	}
	var req struct {
		item
		TransactItems []map[string]item
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	var ps []string
	add := func(it item) {
		for _, m := range []map[string]json.RawMessage{it.Item, it.Key} {
			if v, ok := m[attr]; ok {
				ps = append(ps, it.TableName+"\x00"+string(v))
			}
		}
	}
	add(req.item)
	for _, t := range req.TransactItems {
		for _, it := range t {
			add(it)
		}
	}
	return ps
}

// overPartition takes a token from each partition the body touches, or
// reports one is over its capacity.
func (p *Proxy) overPartition(body []byte, now time.Time) bool {
	keys := partitions(body, p.partAttr)
	for _, k := range keys {
		b := p.parts[k]
		if b == nil {
			b = &bucket{tokens: p.partRate, last: now}
			p.parts[k] = b
		}
		b.tokens = min(p.partRate, b.tokens+now.Sub(b.last).Seconds()*p.partRate)
		b.last = now
		if b.tokens < 1 {
			return true
		}
	}
	for _, k := range keys {
		p.parts[k].tokens--
	}
	return false
}

// Stats returns a copy of the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.ByOp = make(map[string]int, len(p.stats.ByOp))
	for k, v := range p.stats.ByOp {
		s.ByOp[k] = v
	}
	s.Injected = make(map[Fault]int, len(p.stats.Injected))
	for k, v := range p.stats.Injected {
		s.Injected[k] = v
	}
	return s
}

// Requests is how many requests of op were received ("" for all).
func (p *Proxy) Requests(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if op == "" {
		return p.stats.Requests
	}
	return p.stats.ByOp[op]
}

// Injected is how many faults of kind f rules injected.
func (p *Proxy) Injected(f Fault) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats.Injected[f]
}

// ResetStats zeroes the counters.
func (p *Proxy) ResetStats() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats = Stats{ByOp: map[string]int{}, Injected: map[Fault]int{}}
}

// operation is the X-Amz-Target's operation: "DynamoDB_20120810.PutItem" → "PutItem".
func operation(r *http.Request) string {
	t := r.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(t, '.'); i >= 0 {
		return t[i+1:]
	}
	return t
}

// tables lists the tables a DynamoDB request body names: its TableName,
// the TableName of each of its TransactItems (Put, Update, Delete,
// ConditionCheck, Get) and the keys of its RequestItems (batches). A body
// that is not JSON names none.
func tables(body []byte) []string {
	type named struct{ TableName string }
	var req struct {
		TableName     string
		TransactItems []map[string]named
		RequestItems  map[string]json.RawMessage
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	var ts []string
	if req.TableName != "" {
		ts = append(ts, req.TableName)
	}
	for _, item := range req.TransactItems {
		for _, n := range item {
			if n.TableName != "" {
				ts = append(ts, n.TableName)
			}
		}
	}
	for t := range req.RequestItems {
		ts = append(ts, t)
	}
	return ts
}

// decide counts the request and picks its fault. body is the request's
// body, parsed only when a rule names a table.
func (p *Proxy) decide(op string, body []byte, now time.Time) (Rule, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Requests++
	p.stats.ByOp[op]++
	var named []string
	parsed := false
	for _, r := range p.rules {
		if r.Op != "" && r.Op != op {
			continue
		}
		if r.Table != "" {
			if !parsed {
				named, parsed = tables(body), true
			}
			if !slices.Contains(named, r.Table) {
				continue
			}
		}
		if r.Body != nil && !r.Body(body) {
			continue
		}
		r.seen++
		if r.Nth > 0 && r.seen != r.Nth {
			continue
		}
		if r.Times > 0 && r.fired >= r.Times {
			continue
		}
		if r.Rate > 0 && r.Rate < 1 && p.rng.Float64() >= r.Rate {
			continue
		}
		r.fired++
		p.stats.Injected[r.Fault]++
		return r.Rule, true
	}
	if p.partRate > 0 && p.overPartition(body, now) {
		p.stats.OverPartitionCapacity++
		return Rule{Fault: Throttle}, true
	}
	if p.rate > 0 {
		p.tokens = min(p.rate, p.tokens+now.Sub(p.last).Seconds()*p.rate)
		p.last = now
		if p.tokens < 1 {
			p.stats.OverCapacity++
			return Rule{Fault: Throttle}, true
		}
		p.tokens--
	}
	return Rule{}, false
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Add under mu, checked against closed, so Close's Wait never races an Add.
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		reset(w)
		return
	}
	p.handlers.Add(1)
	p.mu.Unlock()
	defer p.handlers.Done()
	ctx, stop := context.WithCancel(r.Context())
	defer stop()
	unlink := context.AfterFunc(p.done, stop)
	defer unlink()
	r = r.WithContext(ctx)
	op := operation(r)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		reset(w)
		return
	}
	rl, inject := p.decide(op, body, time.Now())
	if inject && !rl.After {
		switch rl.Fault {
		case Throttle:
			writeError(w, http.StatusBadRequest, "ProvisionedThroughputExceededException",
				"faultproxy: the level of configured provisioned throughput for the table was exceeded")
			return
		case ThrottlingException:
			writeError(w, http.StatusBadRequest, "ThrottlingException", "faultproxy: rate of requests exceeds the allowed throughput")
			return
		case InternalError:
			writeError(w, http.StatusInternalServerError, "InternalServerError", "faultproxy: injected internal server error")
			return
		case Reset:
			reset(w)
			return
		case Cancel:
			writeCancel(w, rl.Reasons)
			return
		case AccessDenied:
			writeError(w, http.StatusBadRequest, "AccessDeniedException",
				"faultproxy: not authorized to perform: dynamodb:"+op+" on this resource")
			return
		case ResourceNotFound:
			writeError(w, http.StatusBadRequest, "ResourceNotFoundException",
				"faultproxy: requested resource not found")
			return
		case Validation:
			writeError(w, http.StatusBadRequest, "ValidationException",
				"faultproxy: Invalid ConditionExpression: The expression has redundant parentheses;")
			return
		case Refuse:
			w.Header().Set("X-Amzn-Query-Error", rl.Code+";Sender")
			writeError(w, http.StatusBadRequest, rl.Code, rl.Message)
			return
		case Latency:
			t := time.NewTimer(rl.Delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				reset(w) // closing: the client must not read a made-up 200
				return
			}
		}
	}
	resp, answer, err := p.forward(r, body)
	if err != nil {
		writeError(w, http.StatusBadGateway, "InternalFailure", "faultproxy: "+err.Error())
		return
	}
	if inject && rl.After {
		switch rl.Fault {
		case Reset:
			reset(w)
			return
		case InternalError:
			writeError(w, http.StatusInternalServerError, "InternalServerError", "faultproxy: injected internal server error after commit")
			return
		}
	}
	for k, vs := range resp.Header {
		if k == "Content-Length" || k == "Connection" {
			continue
		}
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// forward sends r, whose body was read as in, to the target and reads the
// whole answer.
func (p *Proxy) forward(r *http.Request, in []byte) (*http.Response, []byte, error) {
	u := *p.target
	u.Path = r.URL.Path
	u.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), bytes.NewReader(in))
	if err != nil {
		return nil, nil, err
	}
	out.Header = r.Header.Clone()
	out.Host = r.Host // the SigV4 signature covers the Host the client used
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	p.stats.Forwarded++
	p.mu.Unlock()
	return resp, body, nil
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.Header().Set("X-Amzn-RequestId", "faultproxy")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":%q}`, code, msg)
}

func writeCancel(w http.ResponseWriter, reasons []string) {
	type reason struct {
		Code    string
		Message string `json:",omitempty"`
	}
	body := struct {
		Type                string `json:"__type"`
		Message             string `json:"message"`
		CancellationReasons []reason
	}{Type: "com.amazonaws.dynamodb.v20120810#TransactionCanceledException"}
	for _, r := range reasons {
		rs := reason{Code: r}
		if r != "None" {
			rs.Message = "faultproxy: injected " + r
		}
		body.CancellationReasons = append(body.CancellationReasons, rs)
	}
	body.Message = "Transaction cancelled, please refer cancellation reasons for specific reasons [" + strings.Join(reasons, ", ") + "]"
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-ErrorType", "TransactionCanceledException")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(b)
}

// reset hijacks the connection and closes it with SO_LINGER 0, so the
// client reads a TCP RST rather than a clean end of stream.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok { // HTTP/2: no connection to reset; the nearest fault is a 5xx
		writeError(w, http.StatusBadGateway, "InternalFailure", "faultproxy: connection cannot be hijacked")
		return
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// Wait blocks until the proxy has received n requests of op ("" for all)
// or ctx ends.
func (p *Proxy) Wait(ctx context.Context, op string, n int) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for p.Requests(op) < n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
