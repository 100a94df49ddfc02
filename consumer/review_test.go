package consumer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// auditedWrite embeds the Store's write to carry a note of its own: its
// kind is the Store's (promoted), its type is not.
type auditedWrite struct {
	memstore.Write
	note string
}

// claimsPostgres is a wrapper whose Capabilities declare another Store's
// writes than the Store behind commits.
type claimsPostgres struct{ *memstore.Store }

func (s claimsPostgres) Capabilities() dedup.Capabilities {
	c := s.Store.Capabilities()
	c.Writes = "pgstore"
	return c
}

type reviewPGWrite struct{}

func (reviewPGWrite) WriteKind() dedup.WriteKind { return "pgstore" }

// A write that passes the Guard's kind check and is still refused by the
// Store (a type that borrows the kind by embedding, or a wrapper whose
// Capabilities declare writes the Store behind does not commit) is a
// handler built for writes its Store does not take: the deployment's
// fault, as a *WriteTypeError is, met by every message alike. The message
// must be given back, not dead-lettered.
func TestReviewUnsupportedWriteIsNotTheMessagesFault(t *testing.T) {
	for name, tc := range map[string]struct {
		store dedup.Store
		write dedup.Write
	}{
		"embedded kind":       {memstoretest.New(t), auditedWrite{note: "x"}},
		"wrapper declares pg": {claimsPostgres{memstoretest.New(t)}, reviewPGWrite{}},
	} {
		t.Run(name, func(t *testing.T) {
			h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
				return consumer.Result{Writes: []dedup.Write{tc.write}}, nil
			})
			g, err := consumer.NewGuard(tc.store, h)
			if err != nil {
				t.Fatal(err)
			}
			o := g.Process(context.Background(), &consumer.Message{ID: "m-1", Body: []byte("b"), Deliveries: 1})
			if o.Kind != consumer.Misconfigured || o.Action() != consumer.Retry || !errors.Is(o.Err, dedup.ErrUnsupportedWrite) {
				t.Fatalf("outcome %v, action %v, err %v: want Misconfigured and the message given back (Retry)", o.Kind, o.Action(), o.Err)
			}
		})
	}
}

// A nil *memstore.Store (a store whose New error went unread) or a nil
// HandlerFunc is refused by NewGuard, as a nil interface is, not met as a
// panic at the first message.
func TestReviewNewGuardRefusesNilPointers(t *testing.T) {
	var st *memstore.Store
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	if _, err := consumer.NewGuard(st, h); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("NewGuard(nil *memstore.Store): %v, want ErrInvalidConfig", err)
	}
	var nilH consumer.HandlerFunc
	if _, err := consumer.NewGuard(memstoretest.New(t), nilH); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("NewGuard(nil HandlerFunc): %v, want ErrInvalidConfig", err)
	}
}

// noOneShot declares ClaimComplete (its Capabilities are the memory
// store's) but answers it as a Store without the one-round-trip claim
// does, with errors.ErrUnsupported.
type noOneShot struct{ *memstore.Store }

func (noOneShot) ClaimComplete(context.Context, dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	return dedup.Claim{}, errors.ErrUnsupported
}

// A Store (or a wrapper) whose Capabilities declare a feature it then
// answers with errors.ErrUnsupported is a fault of the deployment: the
// Misconfigured outcome, which stops a Consumer, not an outage held and
// retried for ever.
func TestReviewUnsupportedOperationIsMisconfigured(t *testing.T) {
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	g, err := consumer.NewGuard(noOneShot{memstoretest.New(t)}, h, consumer.OneRoundTrip())
	if err != nil {
		t.Fatal(err)
	}
	o := g.Process(context.Background(), &consumer.Message{ID: "m-1", Body: []byte("b"), Deliveries: 1})
	if o.Kind != consumer.Misconfigured || !errors.Is(o.Err, errors.ErrUnsupported) {
		t.Fatalf("outcome %v, err %v: want Misconfigured with errors.ErrUnsupported", o.Kind, o.Err)
	}
}
