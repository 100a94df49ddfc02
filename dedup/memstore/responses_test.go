package memstore_test

import (
	"bytes"
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// Small responses share the store's runs: each record keeps its own bytes
// whatever the caller does with its slice afterwards, whatever a reader
// appends to what it read, and the responses committed next to it.
func TestResponsesKeptApart(t *testing.T) {
	st := memstoretest.New(t)
	ctx := context.Background()
	now := time.Now()
	const n = 200 // past one run of every shard the keys fall in
	want := func(i int) []byte { return []byte("response-" + strconv.Itoa(i)) }
	for i := range n {
		key := "k" + strconv.Itoa(i)
		resp := want(i)
		if i%2 == 0 {
			c, err := st.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
			if err != nil || !c.Acquired {
				t.Fatalf("claim %s: %+v %v", key, c, err)
			}
			if err := st.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Response: resp, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		} else if _, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: key, Owner: "o", Response: resp, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		copy(resp, "XXXXXXXX") // the caller's slice is its own again
	}
	for i := range n {
		r, err := st.Get(ctx, "k"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.Response, want(i)) {
			t.Fatalf("record %d: response %q, want %q", i, r.Response, want(i))
		}
		_ = append(r.Response, "appended by a reader"...)
	}
	for i := range n {
		if r, _ := st.Get(ctx, "k"+strconv.Itoa(i)); !bytes.Equal(r.Response, want(i)) {
			t.Fatalf("record %d after reads: response %q, want %q", i, r.Response, want(i))
		}
	}
	// An empty response stays empty, not absent.
	c, err := st.Claim(ctx, dedup.ClaimRequest{Key: "empty", Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Response: []byte{}, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if r, _ := st.Get(ctx, "empty"); r.Response == nil || len(r.Response) != 0 {
		t.Fatalf("empty response read back as %#v", r.Response)
	}
}

// BenchmarkClaimComplete is a message's two calls to the store, a claim
// and a complete with a small response, from every core (one op, one new
// key).
func BenchmarkClaimComplete(b *testing.B) {
	st := memstoretest.New(b)
	ctx := context.Background()
	now := time.Now()
	resp := []byte("ok")
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := keys[next.Add(1)-1]
			c, err := st.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
			if err != nil || !c.Acquired {
				b.Errorf("claim: %+v %v", c, err)
				return
			}
			if err := st.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Response: resp, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
