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
