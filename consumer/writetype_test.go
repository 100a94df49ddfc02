package consumer_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/memsource"
)

// otherStoresWrite is a business write of a type memstore does not commit:
// a handler written for another Store.
type otherStoresWrite struct{ SQL string }

func (otherStoresWrite) WriteKind() dedup.WriteKind { return "pgstore" }

// commitCounting counts the commits that reach the Store.
type commitCounting struct {
	*memstore.Store
	commits atomic.Int32
}

func (s *commitCounting) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	s.commits.Add(1)
	return s.Store.Complete(ctx, req)
}

func (s *commitCounting) ClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	s.commits.Add(1)
	return s.Store.ClaimComplete(ctx, req)
}

// A handler whose write is of a type the Store does not declare is a fault
// of the deployment, met at the first message: Run stops with a
// *WriteTypeError naming the Store and the type (never the key), the Store
// is not asked to commit it, and the message is given back with no
// attempt spent, never dead-lettered; in one round trip nothing is
// written at all.
func TestWrongWriteTypeStopsRun(t *testing.T) {
	for _, oneShot := range []bool{false, true} {
		t.Run(map[bool]string{false: "lease", true: "one-round-trip"}[oneShot], func(t *testing.T) {
			const secret = "customer-4711@example.com"
			q := memsourcetest.NewQueue(t, "wrong-writes")
			for range 3 {
				_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte("order"),
					Attributes: map[string]string{consumer.IdempotencyKeyAttribute: secret}})
			}
			var runs atomic.Int32
			h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
				runs.Add(1)
				return consumer.Result{Response: []byte("ok"), Writes: []dedup.Write{memstore.Write{}, otherStoresWrite{SQL: "insert"}}}, nil
			})
			store := &commitCounting{Store: memstoretest.New(t)}
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
			var we *consumer.WriteTypeError
			if !errors.Is(err, consumer.ErrMisconfigured) || !errors.As(err, &we) || ctx.Err() != nil {
				t.Fatalf("Run = %v (ctx %v), want ErrMisconfigured wrapping a *WriteTypeError", err, ctx.Err())
			}
			if we.Store != "*consumer_test.commitCounting" || we.Type != reflect.TypeFor[otherStoresWrite]() || we.Index != 1 {
				t.Fatalf("WriteTypeError %+v: want the Store *consumer_test.commitCounting, write 1 of type otherStoresWrite", we)
			}
			if msg := err.Error(); !strings.Contains(msg, "consumer_test.otherStoresWrite") || !strings.Contains(msg, "commitCounting") ||
				strings.Contains(msg, secret) {
				t.Fatalf("error text %q: want the Store and the type named, and never the key", msg)
			}
			if n := store.commits.Load(); n != 0 {
				t.Fatalf("%d commits reached the Store, want none", n)
			}
			if runs.Load() == 0 {
				t.Fatal("the handler never ran")
			}
			if d := q.DeadLetters(); len(d) != 0 {
				t.Fatalf("dead letters %v, want none", d)
			}
			if s := q.Stats(); s.Ready+s.Delayed+s.InFlight != 3 || s.Acked != 0 {
				t.Fatalf("queue %+v: want every message kept", s)
			}
			key, err := dedup.Key("onceq", secret)
			if err != nil {
				t.Fatal(err)
			}
			r, err := store.Get(context.Background(), key)
			if oneShot {
				if !errors.Is(err, dedup.ErrNotFound) {
					t.Fatalf("record %+v (%v): want none written in one round trip", r, err)
				}
				return
			}
			// The lease is given back as the consumer gives back every
			// message it stops on for a deployment fault: its attempt
			// refunded and the record expired at once, so the message runs
			// as new once the deployment is mended, with its full budget.
			if err != nil || r.Attempts != 0 || r.ExpiresAt.After(time.Now()) {
				t.Fatalf("record %+v (%v): want no attempt spent and the key claimable at once", r, err)
			}
			cl, err := store.Claim(context.Background(), dedup.ClaimRequest{Key: key, Owner: "next", Now: time.Now(), LeaseUntil: time.Now().Add(time.Minute)})
			if err != nil || !cl.Acquired || cl.Attempt != 1 {
				t.Fatalf("claim after the fault: %+v (%v), want the key taken as a first attempt", cl, err)
			}
		})
	}
}

// A Guard used in a loop of one's own returns the same fault from Process,
// as a Misconfigured outcome whose action gives the message back.
func TestWrongWriteTypeGuardOutcome(t *testing.T) {
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Writes: []dedup.Write{otherStoresWrite{}}}, nil
	})
	g, err := consumer.NewGuard(memstoretest.New(t), h)
	if err != nil {
		t.Fatal(err)
	}
	o := g.Process(context.Background(), &consumer.Message{ID: "m-1", Body: []byte("b"), Deliveries: 1})
	var we *consumer.WriteTypeError
	if o.Kind != consumer.Misconfigured || o.Action() != consumer.Retry || !errors.As(o.Err, &we) || we.Store != "*memstore.Store" {
		t.Fatalf("outcome %v, action %v, err %v: want Misconfigured, Retry and a *WriteTypeError naming *memstore.Store", o.Kind, o.Action(), o.Err)
	}
}

// Result.Writes is typed: a value that is no Store's write (a bare SQL
// string, a DynamoDB item not converted to dynamostore.Write) does not
// compile, rather than being found at run time.
func TestResultWritesAreTyped(t *testing.T) {
	f, _ := reflect.TypeFor[consumer.Result]().FieldByName("Writes")
	if f.Type != reflect.TypeFor[[]dedup.Write]() {
		t.Fatalf("Result.Writes is %v, want []dedup.Write", f.Type)
	}
	var w dedup.Write = memstore.Write{}
	if w.WriteKind() != memstore.Kind || (memstoretest.New(t).Capabilities().Writes != memstore.Kind) {
		t.Fatalf("memstore.Write's kind %q, the Store declares %q", w.WriteKind(), memstoretest.New(t).Capabilities().Writes)
	}
}
