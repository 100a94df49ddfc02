package memstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) dedup.Store { return memstoretest.New(t) }, storetest.Options{NilWrites: []dedup.Write{(*memstore.Write)(nil)}, Inserts: inserts,
		RejectingWrite: func() dedup.Write { return memstore.Write{Check: func() error { return errors.New("out of stock") }} }})
}

func TestWritesAllOrNothing(t *testing.T) {
	st := memstoretest.New(t)
	ctx := context.Background()
	now := time.Now()
	stock := 3
	reserve := func(q int) memstore.Write {
		return memstore.Write{
			Check: func() error {
				if stock < q {
					return errors.New("out of stock")
				}
				return nil
			},
			Apply: func() { stock -= q },
		}
	}
	c, err := st.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Now: now, ExpiresAt: now.Add(time.Hour),
		Writes: []dedup.Write{reserve(1), reserve(5)}})
	var be *dedup.BusinessConditionError
	if !errors.As(err, &be) || be.Index != 1 {
		t.Fatalf("complete: %v, want a business condition failure at index 1", err)
	}
	if stock != 3 {
		t.Fatalf("a cancelled commit applied a write: stock %d", stock)
	}
	if r, _ := st.Get(ctx, "k"); r.Status != dedup.StatusPending {
		t.Fatalf("a cancelled commit changed the record: %s", r.Status)
	}
	if err := st.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Now: now, ExpiresAt: now.Add(time.Hour),
		Writes: []dedup.Write{reserve(2)}}); err != nil {
		t.Fatal(err)
	}
	if stock != 1 {
		t.Fatalf("stock %d after reserving 2 of 3", stock)
	}
	cc, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: "k2", Owner: "a", Now: now, ExpiresAt: now.Add(time.Hour),
		Writes: []dedup.Write{reserve(2)}})
	if !errors.As(err, &be) || cc.Acquired {
		t.Fatalf("ClaimComplete beyond stock: %v acquired %v", err, cc.Acquired)
	}
	if _, err := st.Get(ctx, "k2"); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("a cancelled ClaimComplete left a record: %v", err)
	}
}

func TestSweep(t *testing.T) {
	st := memstoretest.New(t)
	ctx := context.Background()
	now := time.Now()
	for i, ttl := range []time.Duration{time.Second, time.Hour} {
		if _, err := st.Claim(ctx, dedup.ClaimRequest{Key: string(rune('a' + i)), Owner: "o", Now: now, LeaseUntil: now.Add(ttl)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.Sweep(now.Add(time.Minute)); n != 1 || st.Len() != 1 {
		t.Fatalf("swept %d, left %d; want 1 and 1", n, st.Len())
	}
}

// The memory store has no key limits: a key is kept as given, however long
// or whatever its bytes.
func TestKeysKeptAsGiven(t *testing.T) {
	st := memstoretest.New(t)
	now := time.Now()
	for _, k := range []string{strings.Repeat("k", 10<<10), "ns#\xff\xfe", "ns#sha256:00"} {
		c, err := st.Claim(context.Background(), dedup.ClaimRequest{Key: k, Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil || !c.Acquired || c.Lease.Key != k {
			t.Fatalf("claim %.20q: %+v %v", k, c, err)
		}
		if r, err := st.Get(context.Background(), k); err != nil || r.Key != k {
			t.Fatalf("get %.20q: key %.20q, %v", k, r.Key, err)
		}
	}
}
