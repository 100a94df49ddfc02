package storetest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
)

// Wrapped is a pass-through wrapper, as a user writes one to log or count
// calls: it embeds the Store and overrides nothing, so Capabilities and
// every method reach the Store it wraps.
type Wrapped struct{ dedup.Store }

// counting is a wrapper that overrides the two claims to count them, and
// forwards everything else (Capabilities among them) by embedding.
type counting struct {
	dedup.Store
	claims, claimCompletes atomic.Int32
}

func (c *counting) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, req)
}

func (c *counting) ClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	c.claimCompletes.Add(1)
	return c.Store.ClaimComplete(ctx, req)
}

// wrapperKeepsCapabilities: a wrapper declares what the Store declares,
// and a Guard in one-round-trip mode over a wrapper (with its COMPLETED
// cache in front) claims in one ClaimComplete call, never Claim.
func (s *suite) wrapperKeepsCapabilities(t *testing.T, st dedup.Store) {
	caps, got := st.Capabilities(), (Wrapped{st}).Capabilities()
	if got.ClaimComplete != caps.ClaimComplete || got.TenantKeyed != caps.TenantKeyed || got.Writes != caps.Writes {
		t.Fatalf("wrapped Capabilities %+v, the Store's %+v", got, caps)
	}
	w := &counting{Store: Wrapped{st}}
	handler := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("done")}, nil
	})
	opts := []consumer.GuardOption{consumer.OneRoundTrip(), consumer.Namespace("storetest")}
	if caps.TenantKeyed {
		opts = append(opts, consumer.WithTenantFunc(func(*consumer.Message) (string, error) { return "t", nil }))
	}
	g, err := consumer.NewGuard(w, handler, opts...)
	if !caps.ClaimComplete {
		if err == nil {
			t.Fatal("NewGuard in one-round-trip mode over a Store without ClaimComplete: no error")
		}
		return
	}
	if err != nil {
		t.Fatalf("NewGuard in one-round-trip mode over a wrapper: %v", err)
	}
	m := &consumer.Message{Body: []byte("b"), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: key(t)}}
	if o := g.Process(ctx(t), m); o.Kind != consumer.Processed {
		t.Fatalf("outcome %v (%v), want processed", o.Kind, o.Err)
	}
	if c, cc := w.claims.Load(), w.claimCompletes.Load(); c != 0 || cc != 1 {
		t.Fatalf("%d Claim and %d ClaimComplete calls through the wrapper, want 0 and 1", c, cc)
	}
}
