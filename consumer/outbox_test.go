package consumer_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/cache"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/memsource"
)

// noOutboxStore is a Store that commits no outgoing messages, as a Store
// without transactions (Redis's) declares itself.
type noOutboxStore struct{ commitCounting }

func (s *noOutboxStore) Capabilities() dedup.Capabilities {
	c := s.Store.Capabilities()
	c.Outbox = nil
	return c
}

var onward = []outbox.Message{
	{Destination: "orders", OrderingKey: "o-1", Body: []byte("reserved"), Headers: map[string]string{"type": "order.reserved"}},
	{Destination: "audit", Body: []byte("seen")},
}

// msgWithKey is a message whose idempotency key is key.
func msgWithKey(id, key string) *consumer.Message {
	return &consumer.Message{ID: id, Body: []byte("order"), Deliveries: 1,
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: key}}
}

func storedKey(t *testing.T, key string) string {
	t.Helper()
	k, err := dedup.Key("onceq", key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A handler's outgoing messages commit with its COMPLETED record, in
// either store mode, as entries whose IDs derive from the key and the
// index; a duplicate of the message adds none.
func TestOutboxCommitsWithCompleted(t *testing.T) {
	for _, oneShot := range []bool{false, true} {
		t.Run(map[bool]string{false: "lease", true: "one-round-trip"}[oneShot], func(t *testing.T) {
			store := memstoretest.New(t)
			h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
				return consumer.Result{Response: []byte("ok"), Outbox: onward}, nil
			})
			opts := []consumer.GuardOption{consumer.SendsOnward(), consumer.WithoutCompletedCache()}
			if oneShot {
				opts = append(opts, consumer.OneRoundTrip())
			}
			g, err := consumer.NewGuard(store, h, opts...)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []consumer.Kind{consumer.Processed, consumer.Duplicate} {
				if o := g.Process(context.Background(), msgWithKey("m-1", "order-1")); o.Kind != want {
					t.Fatalf("delivery %d: outcome %v (%v), want %v", i+1, o.Kind, o.Err, want)
				}
			}
			entries, err := store.Outbox().Entries(context.Background(), "", 0)
			if err != nil {
				t.Fatal(err)
			}
			key := storedKey(t, "order-1")
			if len(entries) != len(onward) {
				t.Fatalf("%d entries, want %d (one per outgoing message, none added by the duplicate)", len(entries), len(onward))
			}
			for i, e := range entries {
				if e.ID != outbox.ID(key, i) || e.State != outbox.Pending || e.Destination != onward[i].Destination ||
					string(e.Body) != string(onward[i].Body) || e.OrderingKey != onward[i].OrderingKey {
					t.Fatalf("entry %d = %+v, want message %d as Pending with ID %s", i, e, i, outbox.ID(key, i))
				}
			}
			if entries[0].Headers["type"] != "order.reserved" {
				t.Fatalf("headers %v, want the handler's", entries[0].Headers)
			}
		})
	}
}

// A run that is rejected (by the handler, or by a business write's own
// condition) or that fails commits no outgoing message.
func TestOutboxNotCommittedWithoutSuccess(t *testing.T) {
	refuse := memstore.Write{Check: func() error { return errors.New("out of stock") }}
	cases := map[string]consumer.HandlerFunc{
		"rejected by the handler": func(context.Context, *consumer.Message) (consumer.Result, error) {
			return consumer.Result{Response: []byte("no"), Rejected: true, Outbox: onward}, nil
		},
		"rejected by a write's condition": func(context.Context, *consumer.Message) (consumer.Result, error) {
			return consumer.Result{Response: []byte("ok"), RejectResponse: []byte("no"), Writes: []dedup.Write{refuse}, Outbox: onward}, nil
		},
		"failed": func(context.Context, *consumer.Message) (consumer.Result, error) {
			return consumer.Result{Outbox: onward}, errors.New("downstream down")
		},
	}
	for name, h := range cases {
		for _, oneShot := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "/lease", true: "/one-round-trip"}[oneShot], func(t *testing.T) {
				store := memstoretest.New(t)
				g := sendingGuard(t, store, h, oneShot)
				o := g.Process(context.Background(), msgWithKey("m-1", "order-1"))
				want := consumer.Rejected
				if name == "failed" {
					want = consumer.Retrying
				}
				if o.Kind != want {
					t.Fatalf("outcome %v (%v), want %v", o.Kind, o.Err, want)
				}
				entries, err := store.Outbox().Entries(context.Background(), "", 0)
				if err != nil || len(entries) != 0 {
					t.Fatalf("entries %+v (%v), want none", entries, err)
				}
			})
		}
	}
}

// sendingGuard is a Guard over store that sends onward, in one round trip
// when oneShot.
func sendingGuard(t *testing.T, store dedup.Store, h consumer.Handler, oneShot bool, opts ...consumer.GuardOption) *consumer.Guard {
	t.Helper()
	opts = append(opts, consumer.SendsOnward())
	if oneShot {
		opts = append(opts, consumer.OneRoundTrip())
	}
	g, err := consumer.NewGuard(store, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// SendsOnward over a Store that commits no outgoing messages is refused
// by New and NewGuard, with the Store named, before any message is taken.
func TestSendsOnwardRefusesStoreWithoutOutbox(t *testing.T) {
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	store := &noOutboxStore{commitCounting{Store: memstoretest.New(t)}}
	_, gerr := consumer.NewGuard(store, h, consumer.SendsOnward())
	q := memsourcetest.NewQueue(t, "sends-onward")
	_, cerr := consumer.New(q.Source(), store, h, consumer.SendsOnward())
	for name, err := range map[string]error{"NewGuard": gerr, "New": cerr} {
		var oe *consumer.OutboxUnsupportedError
		if !errors.Is(err, consumer.ErrInvalidConfig) || !errors.Is(err, consumer.ErrOutboxUnsupported) || !errors.As(err, &oe) ||
			oe.Store != "*consumer_test.noOutboxStore" || !strings.Contains(err.Error(), "noOutboxStore") {
			t.Errorf("%s = %v, want ErrInvalidConfig and an *OutboxUnsupportedError naming *consumer_test.noOutboxStore", name, err)
		}
	}
	if _, err := consumer.NewGuard(memstoretest.New(t), h, consumer.SendsOnward()); err != nil {
		t.Fatalf("NewGuard over a Store with an outbox: %v", err)
	}
}

// Without SendsOnward, the first Result with outgoing messages over a
// Store that cannot commit them is a fault of the deployment, as a write
// of another Store's type is: Run stops with an *OutboxUnsupportedError
// (never naming the key), the Store is not asked to commit, and every
// message is kept, none dead-lettered.
func TestOutboxOverStoreWithoutOutboxStopsRun(t *testing.T) {
	for _, oneShot := range []bool{false, true} {
		t.Run(map[bool]string{false: "lease", true: "one-round-trip"}[oneShot], func(t *testing.T) {
			const secret = "customer-4711@example.com"
			q := memsourcetest.NewQueue(t, "no-outbox")
			for range 3 {
				_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("order"),
					Attributes: map[string]string{consumer.IdempotencyKeyAttribute: secret}})
			}
			var runs atomic.Int32
			h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
				runs.Add(1)
				return consumer.Result{Response: []byte("ok"), Outbox: onward}, nil
			})
			store := &noOutboxStore{commitCounting{Store: memstoretest.New(t)}}
			opts := []consumer.Option{consumer.Concurrency(1)}
			if oneShot {
				opts = append(opts, consumer.OneRoundTrip())
			}
			c, err := consumer.New(q.Source(), store, h, opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = c.Run(ctx)
			var oe *consumer.OutboxUnsupportedError
			if !errors.Is(err, consumer.ErrMisconfigured) || !errors.As(err, &oe) || ctx.Err() != nil {
				t.Fatalf("Run = %v (ctx %v), want ErrMisconfigured wrapping an *OutboxUnsupportedError", err, ctx.Err())
			}
			if oe.Store != "*consumer_test.noOutboxStore" || oe.Messages != len(onward) || strings.Contains(err.Error(), secret) {
				t.Fatalf("error %v: want the Store and the message count named, never the key", err)
			}
			if n := store.commits.Load(); n != 0 || runs.Load() == 0 {
				t.Fatalf("%d commits reached the Store after %d runs, want none after at least one", n, runs.Load())
			}
			if d := q.DeadLetters(); len(d) != 0 {
				t.Fatalf("dead letters %v, want none", d)
			}
			if s := q.Stats(); s.Ready+s.Delayed+s.InFlight != 3 || s.Acked != 0 {
				t.Fatalf("queue %+v: want every message kept", s)
			}
			if e, _ := store.Outbox().Entries(context.Background(), "", 0); len(e) != 0 {
				t.Fatalf("entries %+v, want none", e)
			}
		})
	}
}

// A Guard in a loop of one's own gets the same fault from Process, as a
// Misconfigured outcome that gives the message back.
func TestOutboxOverStoreWithoutOutboxGuardOutcome(t *testing.T) {
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Outbox: onward[:1]}, nil
	})
	g, err := consumer.NewGuard(&noOutboxStore{commitCounting{Store: memstoretest.New(t)}}, h)
	if err != nil {
		t.Fatal(err)
	}
	o := g.Process(context.Background(), msgWithKey("m-1", "order-1"))
	if o.Kind != consumer.Misconfigured || o.Action() != consumer.Retry || !errors.Is(o.Err, consumer.ErrOutboxUnsupported) {
		t.Fatalf("outcome %v, action %v, err %v: want Misconfigured, Retry and ErrOutboxUnsupported", o.Kind, o.Action(), o.Err)
	}
}

// brokenOutboxStore is a Store whose outbox cannot work (its table is
// missing, say): the relay's view its Capabilities hand over fails its
// Check.
type brokenOutboxStore struct{ *memstore.Store }

type brokenOutbox struct{ outbox.Store }

var errNoOutboxTable = errors.New("no outbox table")

func (brokenOutbox) Check(context.Context) error { return errNoOutboxTable }

func (s brokenOutboxStore) Capabilities() dedup.Capabilities {
	c := s.Store.Capabilities()
	c.Outbox = brokenOutbox{c.Outbox}
	return c
}

// With SendsOnward, a Guard's Check checks the outbox whose view the
// Store's Capabilities hand over, through a wrapper of the Store (the
// COMPLETED cache, one that embeds it) too; without it, the outbox is
// not the Guard's concern.
func TestSendsOnwardChecksTheOutbox(t *testing.T) {
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	for name, store := range map[string]dedup.Store{
		"the store":        brokenOutboxStore{memstoretest.New(t)},
		"behind the cache": cache.Wrap(brokenOutboxStore{memstoretest.New(t)}, 10, 0),
		"embedded":         struct{ dedup.Store }{brokenOutboxStore{memstoretest.New(t)}},
	} {
		g, err := consumer.NewGuard(store, h, consumer.SendsOnward())
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Check(context.Background()); !errors.Is(err, consumer.ErrMisconfigured) || !errors.Is(err, errNoOutboxTable) {
			t.Fatalf("%s: Check = %v, want ErrMisconfigured wrapping the outbox's error", name, err)
		}
		g, err = consumer.NewGuard(store, h)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Check(context.Background()); err != nil {
			t.Fatalf("%s: Check without SendsOnward: %v", name, err)
		}
	}
}

// An outgoing message no Sender could deliver (an empty Destination, one
// with a control character) is the handler's fault, found when its result
// commits: nothing is committed, neither the entries nor the COMPLETED
// record, and the message is dead-lettered with an
// *outbox.UndeliverableError naming the message, in either store mode.
func TestOutboxUndeliverableMessageDeadLetters(t *testing.T) {
	for name, bad := range map[string]outbox.Message{
		"empty destination":   {Body: []byte("nowhere")},
		"control destination": {Destination: "orders\nforged", Body: []byte("forged")},
	} {
		for _, oneShot := range []bool{false, true} {
			t.Run(name+"/"+map[bool]string{false: "lease", true: "one-round-trip"}[oneShot], func(t *testing.T) {
				store := memstoretest.New(t)
				h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
					return consumer.Result{Response: []byte("ok"), Outbox: append(onward[:1:1], bad)}, nil
				})
				g := sendingGuard(t, store, h, oneShot, consumer.WithoutCompletedCache())
				o := g.Process(context.Background(), msgWithKey("m-1", "order-1"))
				var ue *outbox.UndeliverableError
				if o.Kind != consumer.DeadLettered || !errors.Is(o.Err, outbox.ErrUndeliverable) || !errors.As(o.Err, &ue) {
					t.Fatalf("outcome %v (%v), want dead-lettered with an *outbox.UndeliverableError", o.Kind, o.Err)
				}
				if ue.Index != 1 || !strings.Contains(o.Reason(), "handler") {
					t.Errorf("error %v names message %d, want message 1 and the handler's fault", o.Err, ue.Index)
				}
				entries, err := store.Outbox().Entries(context.Background(), "", 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(entries) != 0 {
					t.Errorf("%d entries committed, want none", len(entries))
				}
				if r, err := store.Get(context.Background(), storedKey(t, "order-1")); err == nil && r.Status == dedup.StatusCompleted {
					t.Errorf("record %+v: the result was committed", r)
				}
			})
		}
	}
}
