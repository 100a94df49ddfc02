package faultproxy_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testsupport/faultproxy"
)

// backend is a real HTTP server standing for the service: it answers 200
// with the operation it was asked, and counts what reached it.
func backend(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = io.WriteString(w, `{"op":"`+r.Header.Get("X-Amz-Target")+`"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func client() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
}

type answer struct {
	status int
	typ    string
	err    error
}

func call(c *http.Client, url, op string) answer { return callBody(c, url, op, "{}") }

// callBody sends op with body and reads the answer's status and type.
func callBody(c *http.Client, url, op, body string) answer {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810."+op)
	resp, err := c.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	var out struct {
		Type string `json:"__type"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return answer{status: resp.StatusCode, typ: out.Type}
}

func TestForwardsAndCounts(t *testing.T) {
	srv, hits := backend(t)
	p := faultproxy.Start(t, srv.URL)
	c := client()
	for range 3 {
		if a := call(c, p.URL(), "GetItem"); a.err != nil || a.status != 200 {
			t.Fatalf("forwarded: %+v", a)
		}
	}
	call(c, p.URL(), "PutItem")
	s := p.Stats()
	if s.Requests != 4 || s.Forwarded != 4 || s.ByOp["GetItem"] != 3 || p.Requests("PutItem") != 1 || hits.Load() != 4 {
		t.Fatalf("stats %+v, backend %d", s, hits.Load())
	}
}

func TestRules(t *testing.T) {
	srv, hits := backend(t)
	p := faultproxy.Start(t, srv.URL)
	c := client()
	p.AddRule(faultproxy.Rule{Op: "UpdateItem", Nth: 2, Fault: faultproxy.InternalError})
	p.AddRule(faultproxy.Rule{Op: "PutItem", Times: 2, Fault: faultproxy.Throttle})
	p.AddRule(faultproxy.Rule{Op: "GetItem", Times: 1, Fault: faultproxy.ThrottlingException})
	p.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Times: 1, Fault: faultproxy.Cancel, Reasons: []string{"None", "TransactionConflict"}})

	want := []struct {
		op     string
		status int
		typ    string
	}{
		{"UpdateItem", 200, ""},
		{"UpdateItem", 500, "com.amazonaws.dynamodb.v20120810#InternalServerError"},
		{"UpdateItem", 200, ""},
		{"PutItem", 400, "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"},
		{"PutItem", 400, "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"},
		{"PutItem", 200, ""},
		{"GetItem", 400, "com.amazonaws.dynamodb.v20120810#ThrottlingException"},
		{"GetItem", 200, ""},
		{"TransactWriteItems", 400, "com.amazonaws.dynamodb.v20120810#TransactionCanceledException"},
		{"TransactWriteItems", 200, ""},
	}
	for i, w := range want {
		a := call(c, p.URL(), w.op)
		if a.err != nil || a.status != w.status || (w.typ != "" && a.typ != w.typ) {
			t.Fatalf("request %d (%s): %+v, want %d %s", i, w.op, a, w.status, w.typ)
		}
	}
	s := p.Stats()
	if s.Injected[faultproxy.Throttle] != 2 || s.Injected[faultproxy.InternalError] != 1 || s.Injected[faultproxy.ThrottlingException] != 1 {
		t.Fatalf("injected %v", s.Injected)
	}
	if hits.Load() != 5 || s.Forwarded != 5 {
		t.Fatalf("backend saw %d, forwarded %d, want 5", hits.Load(), s.Forwarded)
	}
	p.ClearRules()
	if a := call(c, p.URL(), "PutItem"); a.status != 200 {
		t.Fatalf("after ClearRules: %+v", a)
	}
}

func TestResetAndAfter(t *testing.T) {
	srv, hits := backend(t)
	p := faultproxy.Start(t, srv.URL)
	c := client()
	p.AddRule(faultproxy.Rule{Op: "PutItem", Times: 1, Fault: faultproxy.Reset})
	if a := call(c, p.URL(), "PutItem"); a.err == nil {
		t.Fatalf("reset connection answered %+v", a)
	}
	if hits.Load() != 0 {
		t.Fatal("a reset request reached the backend")
	}
	// After: the backend does the work, the client loses the answer.
	p.AddRule(faultproxy.Rule{Op: "UpdateItem", Times: 1, Fault: faultproxy.Reset, After: true})
	p.AddRule(faultproxy.Rule{Op: "GetItem", Times: 1, Fault: faultproxy.InternalError, After: true})
	if a := call(c, p.URL(), "UpdateItem"); a.err == nil {
		t.Fatalf("reset after forwarding answered %+v", a)
	}
	if a := call(c, p.URL(), "GetItem"); a.status != 500 {
		t.Fatalf("500 after forwarding: %+v", a)
	}
	if hits.Load() != 2 {
		t.Fatalf("backend saw %d requests, want 2 (faults after forwarding)", hits.Load())
	}
	if p.Injected(faultproxy.Reset) != 2 {
		t.Fatalf("resets %d", p.Injected(faultproxy.Reset))
	}
}

func TestLatency(t *testing.T) {
	srv, _ := backend(t)
	p := faultproxy.Start(t, srv.URL)
	p.AddRule(faultproxy.Rule{Fault: faultproxy.Latency, Delay: 150 * time.Millisecond, Times: 1})
	start := time.Now()
	if a := call(client(), p.URL(), "GetItem"); a.status != 200 {
		t.Fatal(a)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("latency %v", d)
	}
}

// A seed fixes which requests a rate rule hits.
func TestRateIsDeterministic(t *testing.T) {
	srv, _ := backend(t)
	pattern := func(seed uint64) string {
		p, err := faultproxy.New(srv.URL, faultproxy.WithSeed(seed))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		p.AddRule(faultproxy.Rule{Rate: 0.3, Fault: faultproxy.Throttle})
		c := client()
		var b strings.Builder
		for range 100 {
			if call(c, p.URL(), "PutItem").status == 400 {
				b.WriteByte('T')
			} else {
				b.WriteByte('.')
			}
		}
		return b.String()
	}
	a, b, other := pattern(7), pattern(7), pattern(8)
	if a != b {
		t.Fatalf("same seed, different faults:\n%s\n%s", a, b)
	}
	if a == other {
		t.Fatal("different seeds, same faults")
	}
	if n := strings.Count(a, "T"); n < 15 || n > 45 {
		t.Fatalf("rate 0.3 gave %d of 100", n)
	}
}

func TestCapacity(t *testing.T) {
	srv, _ := backend(t)
	p := faultproxy.Start(t, srv.URL, faultproxy.WithCapacity(20))
	c := client()
	throttled := 0
	for range 60 {
		if call(c, p.URL(), "PutItem").status == 400 {
			throttled++
		}
	}
	// 60 back-to-back requests against a burst of 20: most beyond it throttle.
	if throttled < 20 || p.Stats().OverCapacity != throttled {
		t.Fatalf("throttled %d, counted %d", throttled, p.Stats().OverCapacity)
	}
	p.SetCapacity(0)
	if a := call(c, p.URL(), "PutItem"); a.status != 200 {
		t.Fatalf("after removing the ceiling: %+v", a)
	}
}

func TestCloseIdempotent(t *testing.T) {
	srv, _ := backend(t)
	p, err := faultproxy.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	p.AddRule(faultproxy.Rule{Fault: faultproxy.Latency, Delay: time.Hour})
	done := make(chan answer, 1)
	go func() { done <- call(client(), p.URL(), "GetItem") }()
	if err := p.Wait(t.Context(), "", 1); err != nil {
		t.Fatal(err)
	}
	p.Close() // must not wait out the hour
	p.Close()
	if a := <-done; a.err == nil {
		t.Fatalf("request through a closed proxy answered %+v", a)
	}
	if _, err := faultproxy.New("not a url"); err == nil {
		t.Fatal("bad target accepted")
	}
}

// A deployment's faults: denied access and a missing table, each a 400
// with the code DynamoDB sends, never forwarded.
func TestAccessDeniedAndResourceNotFound(t *testing.T) {
	srv, hits := backend(t)
	p := faultproxy.Start(t, srv.URL)
	c := client()
	p.AddRule(faultproxy.Rule{Op: "DescribeTable", Fault: faultproxy.ResourceNotFound})
	p.AddRule(faultproxy.Rule{Op: "UpdateItem", Fault: faultproxy.AccessDenied})
	for _, w := range []struct{ op, typ string }{
		{"DescribeTable", "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException"},
		{"UpdateItem", "com.amazonaws.dynamodb.v20120810#AccessDeniedException"},
	} {
		if a := call(c, p.URL(), w.op); a.err != nil || a.status != 400 || a.typ != w.typ {
			t.Fatalf("%s: %+v, want 400 %s", w.op, a, w.typ)
		}
	}
	if a := call(c, p.URL(), "GetItem"); a.status != 200 {
		t.Fatalf("GetItem: %+v, want it forwarded", a)
	}
	if hits.Load() != 1 || p.Injected(faultproxy.AccessDenied) != 1 || p.Injected(faultproxy.ResourceNotFound) != 1 {
		t.Fatalf("backend saw %d, injected %v", hits.Load(), p.Stats().Injected)
	}
	if faultproxy.AccessDenied.String() != "access_denied" || faultproxy.ResourceNotFound.String() != "resource_not_found" {
		t.Fatalf("names %q, %q", faultproxy.AccessDenied, faultproxy.ResourceNotFound)
	}
}

// A rule with a Table fires only on requests naming that table, wherever
// the request names it, and the request's body still reaches the target.
func TestRuleByTable(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(string(b))
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	p := faultproxy.Start(t, srv.URL)
	c := client()
	p.AddRule(faultproxy.Rule{Table: "ledger", Fault: faultproxy.AccessDenied})
	p.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Table: "records", Times: 1, Fault: faultproxy.Throttle})
	cases := []struct {
		name, op, body string
		status         int
	}{
		{"TableName of the rule", "PutItem", `{"TableName":"ledger","Item":{}}`, 400},
		{"another table", "PutItem", `{"TableName":"records","Item":{}}`, 200},
		{"a table whose name contains it", "PutItem", `{"TableName":"ledger2"}`, 200},
		{"one of TransactItems", "TransactWriteItems",
			`{"TransactItems":[{"Update":{"TableName":"records"}},{"Put":{"TableName":"ledger"}}]}`, 400},
		{"a ConditionCheck", "TransactWriteItems", `{"TransactItems":[{"ConditionCheck":{"TableName":"ledger"}}]}`, 400},
		{"a batch", "BatchWriteItem", `{"RequestItems":{"ledger":[]}}`, 400},
		{"a transaction of the other rule", "TransactWriteItems", `{"TransactItems":[{"Update":{"TableName":"records"}}]}`, 400},
		{"that rule spent", "TransactWriteItems", `{"TransactItems":[{"Update":{"TableName":"records"}}]}`, 200},
		{"no table at all", "ListTables", `{}`, 200},
		{"not JSON", "PutItem", `not json`, 200},
	}
	for _, tc := range cases {
		if a := callBody(c, p.URL(), tc.op, tc.body); a.err != nil || a.status != tc.status {
			t.Fatalf("%s: %+v, want %d", tc.name, a, tc.status)
		}
	}
	if s := got.Load(); s != `not json` {
		t.Fatalf("target got body %q, want the client's", s)
	}
	if p.Injected(faultproxy.AccessDenied) != 4 || p.Injected(faultproxy.Throttle) != 1 {
		t.Fatalf("injected %v", p.Stats().Injected)
	}
}

// The per-partition-key limit throttles one hot key beyond its burst and
// leaves other keys, and a transaction on cold keys, alone.
func TestPartitionCapacity(t *testing.T) {
	srv, _ := backend(t)
	p := faultproxy.Start(t, srv.URL)
	p.SetPartitionCapacity("pk", 3)
	c := client()
	put := func(pk string) answer {
		return callBody(c, p.URL(), "PutItem", `{"TableName":"t","Item":{"pk":{"S":"`+pk+`"},"v":{"N":"1"}}}`)
	}
	throttled := 0
	for range 10 {
		if a := put("hot"); strings.HasSuffix(a.typ, "ProvisionedThroughputExceededException") {
			throttled++
		}
	}
	if throttled < 5 {
		t.Errorf("hot key: %d of 10 throttled, want at least 5 beyond a burst of 3", throttled)
	}
	for _, k := range []string{"a", "b", "c"} {
		if a := put(k); a.status != 200 {
			t.Errorf("cold key %s: %+v", k, a)
		}
	}
	txn := `{"TransactItems":[{"Put":{"TableName":"t","Item":{"pk":{"S":"d"}}}},{"Update":{"TableName":"t","Key":{"pk":{"S":"e"}}}}]}`
	if a := callBody(c, p.URL(), "TransactWriteItems", txn); a.status != 200 {
		t.Errorf("transaction on cold keys: %+v", a)
	}
	if a := callBody(c, p.URL(), "TransactWriteItems", `{"TransactItems":[{"Put":{"TableName":"t","Item":{"pk":{"S":"hot"}}}}]}`); !strings.HasSuffix(a.typ, "ProvisionedThroughputExceededException") {
		t.Errorf("transaction touching the hot key: %+v, want a throttle", a)
	}
	if n := p.Stats().OverPartitionCapacity; n != throttled+1 {
		t.Errorf("OverPartitionCapacity %d, want %d", n, throttled+1)
	}
}
