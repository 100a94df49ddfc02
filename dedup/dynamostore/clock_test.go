package dynamostore_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/metrictest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
)

// A claim whose Now is further from DynamoDB's clock than its margin is
// refused before anything is written; one at the real time is accepted,
// and the gauge reports the (small) offset of DynamoDB Local.
func TestClockSkewRefused(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	client := dynamoClient(t, ep, nil)
	reader, mp := metrictest.Provider(t)
	st := newStore(t, client, recordsTable(t, client), dynamostore.WithMeterProvider(mp), dynamostore.WithClockCheck())
	const margin = 5 * time.Second
	// A first call measures the offset.
	if _, err := st.Get(t.Context(), uniqueKey(t)); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatal(err)
	}
	for _, ahead := range []time.Duration{10 * time.Second, 60 * time.Second, -10 * time.Second} {
		k := uniqueKey(t)
		now := time.Now().Add(ahead)
		_, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: k, Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute), SkewMargin: margin})
		var cse *dynamostore.ClockSkewError
		if !errors.Is(err, dynamostore.ErrClockSkew) || !errors.As(err, &cse) || retry.Classify(err) != retry.Misconfigured {
			t.Fatalf("claim %v ahead: %v (class %v), want a Misconfigured *ClockSkewError", ahead, err, retry.Classify(err))
		}
		_, err = st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: k, Owner: "a", Now: now, ExpiresAt: now.Add(time.Hour), SkewMargin: margin})
		if !errors.Is(err, dynamostore.ErrClockSkew) {
			t.Fatalf("ClaimComplete %v ahead: %v, want ErrClockSkew", ahead, err)
		}
		if _, err := st.Get(t.Context(), k); !errors.Is(err, dedup.ErrNotFound) {
			t.Fatalf("a refused claim wrote its record: %v", err)
		}
	}
	now := time.Now()
	c, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: uniqueKey(t), Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute), SkewMargin: margin})
	if err != nil || !c.Acquired {
		t.Fatalf("claim at the real time: %+v, %v", c, err)
	}
	off, ok := metrictest.Gauge(t, reader, "onceq.dynamodb.clock_offset")
	if !ok || math.Abs(off) > 1.5 {
		t.Fatalf("clock_offset %v (reported %v), want within a second and a half of 0 on this host", off, ok)
	}
}

// dateShift is a reverse proxy to DynamoDB Local that moves the Date
// header of every response by shift: a server whose clock is off.
func dateShift(t *testing.T, target string, shift time.Duration) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(r *http.Response) error {
		r.Header.Set("Date", time.Now().Add(shift).UTC().Format(http.TimeFormat))
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// Against a server 20 s ahead, claims are judged by the server's clock: a
// Now at the local time is refused with a 5 s margin and accepted 20 s
// ahead; with a 30 s margin the offset is over half of it and logged
// once, not on every claim.
func TestClockOffsetMeasured(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	direct := dynamoClient(t, ep, nil)
	table := recordsTable(t, direct)
	var logs testenv.LogBuffer
	st := newStore(t, dynamoClient(t, dateShift(t, ep, 20*time.Second), nil), table, dynamostore.WithLogger(logs.Logger(slog.LevelInfo)), dynamostore.WithClockCheck())
	if _, err := st.Get(t.Context(), uniqueKey(t)); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatal(err)
	}
	claim := func(ahead, margin time.Duration) error {
		now := time.Now().Add(ahead)
		_, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: uniqueKey(t), Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute), SkewMargin: margin})
		return err
	}
	if err := claim(0, 5*time.Second); !errors.Is(err, dynamostore.ErrClockSkew) {
		t.Fatalf("claim at local time against a server 20 s ahead: %v, want ErrClockSkew", err)
	}
	if err := claim(20*time.Second, 5*time.Second); err != nil {
		t.Fatalf("claim at the server's time: %v", err)
	}
	for range 3 {
		if err := claim(0, 30*time.Second); err != nil {
			t.Fatalf("claim within a 30 s margin: %v", err)
		}
	}
	if n := strings.Count(logs.String(), "more than half the skew margin"); n != 1 {
		t.Fatalf("%d warnings of the offset, want 1 per crossing:\n%s", n, logs.String())
	}
}

// ClockSkewMargin(0) says the clocks agree: a worker whose clock is 10 s
// ahead is refused (Misconfigured) rather than allowed to take a lease
// another worker still holds; both handlers never run.
func TestZeroMarginRefusesAClockAhead(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	st := newStore(t, client, recordsTable(t, client), dynamostore.WithClockCheck())
	var runs atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	slow := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		runs.Add(1)
		close(entered)
		<-release
		return consumer.Result{Response: []byte("a")}, nil
	})
	fast := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		runs.Add(1)
		return consumer.Result{Response: []byte("b")}, nil
	})
	opts := []consumer.GuardOption{consumer.ClockSkewMargin(0), consumer.HandlerTimeout(5 * time.Second), consumer.LeaseTTL(8 * time.Second),
		consumer.Namespace(uniqueName("margin0"))}
	a, err := consumer.NewGuard(st, slow, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := consumer.NewGuard(st, fast, append(opts, consumer.WithClock(aheadClock(10*time.Second)))...)
	if err != nil {
		t.Fatal(err)
	}
	msg := func(id string) *consumer.Message {
		return &consumer.Message{ID: id, Body: []byte("o"), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "o-1"}}
	}
	outA := make(chan consumer.Outcome, 1)
	go func() { outA <- a.Process(t.Context(), msg("m-1")) }()
	<-entered
	ob := b.Process(t.Context(), msg("m-2"))
	close(release)
	if oa := <-outA; oa.Kind != consumer.Processed {
		t.Fatalf("A: %v (%v)", oa.Kind, oa.Err)
	}
	if ob.Kind != consumer.Misconfigured || !errors.Is(ob.Err, dynamostore.ErrClockSkew) {
		t.Fatalf("B, 10 s ahead under margin 0: %v (%v), want misconfigured by clock skew", ob.Kind, ob.Err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handlers ran %d times, want 1", n)
	}
}
