package consumer_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/payload"
	"github.com/onceq/onceq/sources/memsource"
)

// One order sent twice, the second time re-serialized by another producer:
// members in another order, other whitespace, 2.0 for 2.
const (
	orderSent      = `{"order_id":"A-1","sku":"sku-1","qty":2}`
	orderResent    = "{\n  \"qty\": 2.0,\n  \"sku\": \"sku-1\",\n  \"order_id\": \"A-1\"\n}"
	orderChanged   = `{"order_id":"A-1","sku":"sku-1","qty":3}`
	orderRestamped = `{"order_id":"A-1","sku":"sku-1","qty":2,"sent_at":"12:00"}`
)

// runBodies sends bodies to a queue in order, keyed by their order_id, and
// runs a consumer over them one at a time; it returns each body's outcome
// and how often the handler ran.
func runBodies(t *testing.T, bodies []string, opts ...consumer.Option) (*memsource.Queue, map[string]consumer.Kind, int32) {
	t.Helper()
	q := memsourcetest.NewQueue(t, "orders")
	for _, b := range bodies {
		_ = q.Send(context.Background(), memsource.Outgoing{Body: []byte(b)})
	}
	var calls atomic.Int32
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		calls.Add(1)
		return consumer.Result{}, nil
	})
	var kinds sync.Map
	opts = append([]consumer.Option{consumer.Concurrency(1), consumer.WithKeyFunc(payload.JSONKey("order_id")),
		consumer.WithHooks(outcomeByBody{&kinds})}, opts...)
	c, err := consumer.New(q.Source(), memstoretest.New(t), h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { s := q.Stats(); return s.Acked+s.DeadLettered == len(bodies) })
	out := map[string]consumer.Kind{}
	kinds.Range(func(k, v any) bool { out[k.(string)] = v.(consumer.Kind); return true })
	return q, out, calls.Load()
}

func TestCanonicalJSONTakesReserializedOrderAsDuplicate(t *testing.T) {
	q, kinds, calls := runBodies(t, []string{orderSent, orderResent}, consumer.WithPayloadHash(payload.CanonicalJSON))
	if kinds[orderSent] != consumer.Processed || kinds[orderResent] != consumer.Duplicate {
		t.Fatalf("outcomes %v, want processed then duplicate", kinds)
	}
	if calls != 1 || q.Stats().DeadLettered != 0 {
		t.Fatalf("handler ran %d times, %d dead letters; want 1 and 0", calls, q.Stats().DeadLettered)
	}
}

func TestWholeBodyTakesReserializedOrderAsKeyReuse(t *testing.T) {
	q, kinds, _ := runBodies(t, []string{orderSent, orderResent})
	if kinds[orderResent] != consumer.KeyReuse {
		t.Fatalf("outcomes %v: by default another serialization is another payload", kinds)
	}
	if dl := q.DeadLetters(); len(dl) != 1 || !strings.Contains(dl[0].Reason, "different payload") {
		t.Fatalf("dead letters %+v", dl)
	}
}

func TestJSONFieldsChecksOnlyTheirFields(t *testing.T) {
	fields := consumer.WithPayloadHash(payload.JSONFields("order_id", "sku", "qty"))
	_, kinds, calls := runBodies(t, []string{orderSent, orderRestamped, orderChanged}, fields)
	want := map[string]consumer.Kind{orderSent: consumer.Processed, orderRestamped: consumer.Duplicate, orderChanged: consumer.KeyReuse}
	for b, k := range want {
		if kinds[b] != k {
			t.Errorf("%s: %v, want %v", b, kinds[b], k)
		}
	}
	if calls != 1 {
		t.Errorf("handler ran %d times, want 1", calls)
	}
}

func TestNoPayloadCheckTakesAnyBodyAsDuplicate(t *testing.T) {
	_, kinds, calls := runBodies(t, []string{orderSent, orderChanged}, consumer.WithoutPayloadCheck())
	if kinds[orderChanged] != consumer.Duplicate || calls != 1 {
		t.Fatalf("outcomes %v, %d handler runs; want the changed order a duplicate", kinds, calls)
	}
}

// A body the key function or the payload hash cannot read is the
// message's fault: dead-lettered at once, the handler never run, and the
// reason names the path but holds nothing of the body.
func TestUnreadableBodyIsDeadLettered(t *testing.T) {
	const secret = "card-4111"
	noKey := `{"id":"` + secret + `"}`
	notJSON := `order_id=` + secret
	q, kinds, calls := runBodies(t, []string{noKey, notJSON})
	if calls != 0 || kinds[noKey] != consumer.DeadLettered || kinds[notJSON] != consumer.DeadLettered {
		t.Fatalf("outcomes %v, %d handler runs", kinds, calls)
	}
	for _, d := range q.DeadLetters() {
		if !strings.Contains(d.Reason, `"order_id"`) || strings.Contains(d.Reason, secret) {
			t.Errorf("reason %q: want the path named, no body content", d.Reason)
		}
	}

	// The payload hash's own failure, with the key from the attribute.
	g, err := consumer.NewGuard(memstoretest.New(t), noopHandler(), consumer.WithPayloadHash(payload.CanonicalJSON))
	if err != nil {
		t.Fatal(err)
	}
	o := g.Process(context.Background(), &consumer.Message{Body: []byte(notJSON),
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "k"}})
	if o.Action() != consumer.DeadLetter || !errors.Is(o.Err, payload.ErrNotJSON) || strings.Contains(o.Reason(), secret) {
		t.Fatalf("outcome %v %v", o.Kind, o.Err)
	}
}

// After a change of mode, records stored under the old one are not
// compared: a changed body is a duplicate, not a reused key.
func TestModeChangeDoesNotFlagKeyReuse(t *testing.T) {
	store := memstoretest.New(t)
	ctx := context.Background()
	msg := func(body string) *consumer.Message { return &consumer.Message{Body: []byte(body)} }
	key := consumer.WithKeyFunc(payload.JSONKey("order_id"))
	whole, err := consumer.NewGuard(store, noopHandler(), key)
	if err != nil {
		t.Fatal(err)
	}
	canonical, err := consumer.NewGuard(store, noopHandler(), key, consumer.WithPayloadHash(payload.CanonicalJSON))
	if err != nil {
		t.Fatal(err)
	}
	if o := whole.Process(ctx, msg(orderSent)); o.Kind != consumer.Processed {
		t.Fatalf("first: %v %v", o.Kind, o.Err)
	}
	if o := canonical.Process(ctx, msg(orderChanged)); o.Kind != consumer.Duplicate {
		t.Fatalf("under another mode: %v %v, want Duplicate", o.Kind, o.Err)
	}
	// Two field lists are two modes as well.
	a, _ := consumer.NewGuard(store, noopHandler(), consumer.WithPayloadHash(payload.JSONFields("qty")))
	b, _ := consumer.NewGuard(store, noopHandler(), consumer.WithPayloadHash(payload.JSONFields("sku")))
	keyed := func(body string) *consumer.Message {
		return &consumer.Message{Body: []byte(body), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "fields"}}
	}
	if o := a.Process(ctx, keyed(orderSent)); o.Kind != consumer.Processed {
		t.Fatalf("fields first: %v %v", o.Kind, o.Err)
	}
	if o := b.Process(ctx, keyed(orderChanged)); o.Kind != consumer.Duplicate {
		t.Fatalf("under another field list: %v %v, want Duplicate", o.Kind, o.Err)
	}
	if o := a.Process(ctx, keyed(orderChanged)); o.Kind != consumer.KeyReuse {
		t.Fatalf("under the same field list: %v %v, want KeyReuse", o.Kind, o.Err)
	}
}

func TestNilPayloadHashRefused(t *testing.T) {
	refused(t, consumer.WithPayloadHash(nil))
}

// A duplicate keyed by its idempotency-key attribute is answered from the
// COMPLETED cache under the configured payload hash too: a re-serialized
// body costs no store call, a changed one is still key reuse (no store
// call either).
func TestCachedDuplicateUsesConfiguredPayloadHash(t *testing.T) {
	store := &claimCounter{Store: memstoretest.New(t)}
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("ok")}, nil
	})
	g, err := consumer.NewGuard(store, h, consumer.WithPayloadHash(payload.CanonicalJSON))
	if err != nil {
		t.Fatal(err)
	}
	keyed := func(body string) *consumer.Message {
		return &consumer.Message{ID: body, Body: []byte(body), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "order-1"}}
	}
	ctx := context.Background()
	for _, tc := range []struct {
		body   string
		want   consumer.Kind
		claims int64
	}{
		{`{"a":1,"b":2}`, consumer.Processed, 1},
		{`{ "b": 2, "a": 1 }`, consumer.Duplicate, 1},
		{`{"a":1,"b":3}`, consumer.KeyReuse, 1}, // told by the cached record, as with a KeyFunc
	} {
		if o := g.Process(ctx, keyed(tc.body)); o.Kind != tc.want {
			t.Errorf("%s: %s, want %s", tc.body, o.Kind, tc.want)
		}
		if n := store.claims.Load(); n != tc.claims {
			t.Errorf("%s: %d claims reached the store, want %d", tc.body, n, tc.claims)
		}
	}
}
