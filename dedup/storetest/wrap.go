package storetest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/outbox"
)

// Wrapped is a pass-through wrapper, as a user writes one to log or count
// calls: it embeds the Store and overrides nothing, so Capabilities and
// every method reach the Store it wraps. It has the methods of
// dedup.Store and no other: the views the Store gives reach its users
// through Capabilities.
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

// wrapperHandsOverViews: a wrapper that forwards the Store's methods and
// nothing more (Wrapped: no method of its own for any view) hands over
// every view the Store declares, each usable through it. Outgoing
// messages a Guard over the wrapper commits are listed by the wrapper's
// Outbox, and that Guard's Check reaches the outbox's; an offset row
// taken through its Offsets is read back through them; its Inspector
// finds a record claimed through it. A Store that gives no Outbox is
// refused through the wrapper as alone: a Guard that is to send onward
// at its construction, and a result with outgoing messages at its
// commit, each with a *consumer.OutboxUnsupportedError.
func (s *suite) wrapperHandsOverViews(t *testing.T, st dedup.Store) {
	w := Wrapped{st}
	caps, got := st.Capabilities(), w.Capabilities()
	if (got.Outbox == nil) != (caps.Outbox == nil) || (got.Offsets == nil) != (caps.Offsets == nil) || (got.Inspector == nil) != (caps.Inspector == nil) {
		t.Fatalf("wrapped views: Outbox %T, Offsets %T, Inspector %T; the Store's %T, %T, %T",
			got.Outbox, got.Offsets, got.Inspector, caps.Outbox, caps.Offsets, caps.Inspector)
	}
	dest := destination(t)
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("done"), Outbox: []outbox.Message{msg(dest, "", "onward")}}, nil
	})
	opts := []consumer.GuardOption{consumer.Namespace("storetest")}
	if caps.TenantKeyed {
		opts = append(opts, consumer.WithTenantFunc(func(*consumer.Message) (string, error) { return "t", nil }))
	}
	m := &consumer.Message{Body: []byte("b"), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: key(t)}}
	var unsupported *consumer.OutboxUnsupportedError
	if got.Outbox == nil {
		_, err := consumer.NewGuard(w, h, append(opts, consumer.SendsOnward())...)
		if !errors.As(err, &unsupported) || !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Fatalf("NewGuard with SendsOnward over a wrapped Store without Outbox: %v, want ErrInvalidConfig with a *consumer.OutboxUnsupportedError", err)
		}
		g, err := consumer.NewGuard(w, h, opts...)
		if err != nil {
			t.Fatal(err)
		}
		o := g.Process(ctx(t), m)
		if o.Kind != consumer.Misconfigured || !errors.As(o.Err, &unsupported) || unsupported.Messages != 1 {
			t.Fatalf("outcome %v (%v) of a result with 1 outgoing message over a wrapped Store without Outbox, want Misconfigured with a *consumer.OutboxUnsupportedError", o.Kind, o.Err)
		}
	} else {
		g, err := consumer.NewGuard(w, h, append(opts, consumer.SendsOnward())...)
		if err != nil {
			t.Fatalf("NewGuard with SendsOnward over a wrapped Store with Outbox: %v", err)
		}
		if err := g.Check(ctx(t)); err != nil {
			t.Fatalf("Check of a Guard over the wrapper, its outbox's included: %v", err)
		}
		if o := g.Process(ctx(t), m); o.Kind != consumer.Processed {
			t.Fatalf("outcome %v (%v), want processed", o.Kind, o.Err)
		}
		if es := entries(t, got.Outbox, dest, outbox.Pending); len(es) != 1 || string(es[0].Body) != "onward" {
			t.Fatalf("the wrapper's Outbox lists %d pending entries for the destination (%+v), want the one committed", len(es), es)
		}
	}
	if got.Offsets != nil {
		p := partition(t)
		l := acquire(t, got.Offsets, p, "wrapped")
		wantRow(t, got.Offsets, p, l.Token, -1)
	}
	if got.Inspector == nil {
		t.Fatalf("the wrapped Store (%T) gives no dedup.Inspector", st)
	}
	k := key(t)
	owner := "wrapped-" + dedup.KeyHash(k)
	mustAcquire(t, claim(t, w, k, owner, "h1", 0, 30), 1)
	res, err := got.Inspector.FindKeyHash(ctx(t), dedup.KeyHash(k), inspectLimit)
	if err != nil || owned(res.Records, owner) != 1 {
		t.Fatalf("FindKeyHash through the wrapper's Inspector: %d records of the claim's owner in %+v (%v), want 1", owned(res.Records, owner), res, err)
	}
}
