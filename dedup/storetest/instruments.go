package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/internal/testsupport/metrictest"
	"github.com/onceq/onceq/retry"
)

// Instrumented makes a Store that carries the instruments of package
// storeinstr, for RunInstruments.
type Instrumented struct {
	// System is the Store's db.system.name (storeinstr.SystemPostgreSQL,
	// ...).
	System string
	// New returns a Store over fresh records whose metrics go to mp, with
	// hooks and a retry policy of a few quick attempts, and the faults of
	// its connection to inject (by a proxy, say). The Store sends its
	// requests over one connection at a time, so that a fault meets the
	// request the case makes next.
	New func(t *testing.T, mp metric.MeterProvider, hooks ...storeinstr.Hook) (dedup.Store, Faults)
}

// Faults inject real faults of a Store's connection to its server.
type Faults struct {
	// Cut makes the Store's next request fail before it reaches the
	// server: its connection is closed.
	Cut func()
	// LoseReply makes the server carry out the Store's next request of
	// operation op (storeinstr.OpClaim, OpComplete), and its answer be
	// lost with the connection: the Store cannot know the request
	// succeeded.
	LoseReply func(op string)
}

// RunInstruments checks that a Store counts its requests, errors and
// retries under the metric names and attributes every store shares
// (package storeinstr), tells its hooks and every retry observer handed
// over (Attach, as each Guard over it does), and retries a fault of its
// connection to success: a claim whose connection is cut is won, and a
// claim or a Complete whose answer was lost after the server carried it
// out recognises its own success on the retry, not a lost claim or lease.
func RunInstruments(t *testing.T, in Instrumented) {
	reader, mp := metrictest.Provider(t)
	var h instrHooks
	st, faults := in.New(t, mp, &h)
	var obs [2]instrObserver
	for i := range obs {
		st.Attach(dedup.Runtime{Observe: obs[i].observe})
	}
	ctx := t.Context()
	now := time.Now()
	if err := st.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	first := key(t)
	c, err := st.Claim(ctx, dedup.ClaimRequest{Key: first, Owner: "a", PayloadHash: "h", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !c.Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	faults.Cut()
	second := key(t)
	c2, err := st.Claim(ctx, dedup.ClaimRequest{Key: second, Owner: "b", PayloadHash: "h", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !c2.Acquired || c2.Lease.Owner != "b" {
		t.Fatalf("claim across a cut connection: %+v %v, want it won", c2, err)
	}
	if err := st.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Response: []byte("r"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if _, err := st.Get(ctx, first); err != nil {
		t.Fatalf("get: %v", err)
	}

	// The same kind of request once more before each lost answer, so that
	// the one whose answer is lost is the request itself on a warm
	// connection (a prepared statement, a loaded script), not its setup.
	third := key(t)
	if c3, err := st.Claim(ctx, dedup.ClaimRequest{Key: third, Owner: "c", PayloadHash: "h", Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil || !c3.Acquired {
		t.Fatalf("claim: %+v %v", c3, err)
	}
	faults.LoseReply(storeinstr.OpClaim)
	fourth := key(t)
	c4, err := st.Claim(ctx, dedup.ClaimRequest{Key: fourth, Owner: "d", PayloadHash: "h", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !c4.Acquired || c4.Lease.Owner != "d" || c4.Lease.Version != 1 {
		t.Fatalf("claim whose answer was lost: %+v %v, want it won (its own record, version 1)", c4, err)
	}
	if err := st.Complete(ctx, dedup.CompleteRequest{Lease: c4.Lease, Response: []byte("r4"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	faults.LoseReply(storeinstr.OpComplete)
	if err := st.Complete(ctx, dedup.CompleteRequest{Lease: c2.Lease, Response: []byte("r2"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatalf("complete whose answer was lost: %v, want success (its own COMPLETED record)", err)
	}
	if r, err := st.Get(ctx, second); err != nil || r.Status != dedup.StatusCompleted || r.Owner != "b" || string(r.Response) != "r2" {
		t.Fatalf("record after the lost answer: %+v %v, want COMPLETED by b", r, err)
	}

	system := storeinstr.AttrSystem.String(in.System)
	op := func(o string) attribute.KeyValue { return storeinstr.AttrOperation.String(o) }
	if n, _ := metrictest.Histogram(t, reader, storeinstr.MetricDuration); n < 5 {
		t.Errorf("%s: %d requests timed, want at least 5 (check, two claims, a retry, complete, get)", storeinstr.MetricDuration, n)
	}
	if n := metrictest.Counter(t, reader, storeinstr.MetricRetries, system, op(storeinstr.OpClaim),
		storeinstr.AttrRetryClass.String(retry.Transient.String()), storeinstr.AttrThrottle.Bool(false)); n < 2 {
		t.Errorf("%s: %d transient claim retries, want at least 2", storeinstr.MetricRetries, n)
	}
	if n := metrictest.Counter(t, reader, storeinstr.MetricRetries, system, op(storeinstr.OpComplete)); n < 1 {
		t.Errorf("%s: %d complete retries, want at least 1", storeinstr.MetricRetries, n)
	}
	if n := metrictest.Counter(t, reader, storeinstr.MetricErrors, system, op(storeinstr.OpClaim), storeinstr.AttrThrottle.Bool(false)); n < 1 {
		t.Errorf("%s: %d failed claim requests, want at least 1", storeinstr.MetricErrors, n)
	}
	if n := metrictest.Counter(t, reader, storeinstr.MetricErrors, system, op(storeinstr.OpGet)); n != 0 {
		t.Errorf("%s: %d failed get requests, want none", storeinstr.MetricErrors, n)
	}
	for i := range obs {
		if n := obs[i].count(retry.Transient); n < 2 {
			t.Errorf("retry observer %d of 2 told of %d transient retries, want at least 2 (Attach)", i+1, n)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.retries[storeinstr.OpClaim+"/"+retry.Transient.String()] < 1 {
		t.Errorf("retry hooks told %v, want a transient claim retry", h.retries)
	}
	for _, o := range []string{storeinstr.OpCheck, storeinstr.OpClaim, storeinstr.OpComplete, storeinstr.OpGet} {
		if h.calls[o] < 1 {
			t.Errorf("call hooks told %v, want %s", h.calls, o)
		}
	}
	if h.failed[storeinstr.OpClaim] < 1 {
		t.Errorf("call hooks told failed calls %v, want a failed claim", h.failed)
	}
}

// instrHooks records what the shared hooks are told.
type instrHooks struct {
	mu                     sync.Mutex
	calls, failed, retries map[string]int
}

func (h *instrHooks) OnStoreCall(_ context.Context, op string, _ time.Duration, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls == nil {
		h.calls, h.failed = map[string]int{}, map[string]int{}
	}
	h.calls[op]++
	if err != nil {
		h.failed[op]++
	}
}

func (h *instrHooks) OnStoreRetry(_ context.Context, op string, class retry.Class, _ string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.retries == nil {
		h.retries = map[string]int{}
	}
	h.retries[op+"/"+class.String()]++
}

// instrObserver records what a retry observer handed over by Attach is
// told.
type instrObserver struct {
	mu      sync.Mutex
	classes map[retry.Class]int
}

func (o *instrObserver) observe(class retry.Class, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.classes == nil {
		o.classes = map[retry.Class]int{}
	}
	o.classes[class]++
}

func (o *instrObserver) count(class retry.Class) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.classes[class]
}
