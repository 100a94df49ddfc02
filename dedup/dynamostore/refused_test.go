package dynamostore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
)

// A request the store built alone that DynamoDB refuses as invalid
// (ValidationException) is the store's fault or the deployment's, never
// the message's: the consumer gives the message back (Misconfigured: not
// acked, not dead-lettered, no attempt charged), and the store logs the
// request's shape (its expressions and attribute names) without the key.
func TestRefusedRequestIsNotTheMessages(t *testing.T) {
	rig := newFaultRig(t, fastPolicy(3))
	logs := &testenv.LogBuffer{}
	st := newStore(t, dynamoClient(t, rig.proxy.URL(), nil), rig.direct.Table(), dynamostore.WithRetryPolicy(fastPolicy(3)),
		dynamostore.WithLogger(logs.Logger(-8)))
	const id = "order-7781-secret"
	g, err := consumer.NewGuard(st, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("done")}, nil
	}), consumer.Namespace("test"), consumer.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	// The claim is a PutItem; the Complete's UpdateItem is refused, the
	// Fail that gives the message back lands.
	rig.proxy.AddRule(faultproxy.Rule{Op: "UpdateItem", Times: 1, Fault: faultproxy.Validation})
	m := &consumer.Message{ID: "m1", Body: []byte("{}"), Attributes: map[string]string{"idempotency-key": id}}
	o := g.Process(t.Context(), m)
	if o.Kind != consumer.Misconfigured || o.Action() != consumer.Retry || !errors.Is(o.Err, consumer.ErrMisconfigured) {
		t.Fatalf("outcome %v, action %v, %v; want the message given back as misconfigured", o.Kind, o.Action(), o.Err)
	}
	var refused *dynamostore.RequestRefusedError
	if !errors.As(o.Err, &refused) || refused.Op != "Complete" || refused.Request != "UpdateItem" ||
		!strings.Contains(refused.ConditionExpression, "#owner = :owner") || !strings.Contains(refused.UpdateExpression, "SET #status = :completed") {
		t.Fatalf("error %v; want a *RequestRefusedError of Complete's UpdateItem with its expressions", o.Err)
	}
	key, err := dedup.Key("test", id)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := rig.direct.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status == dedup.StatusDeadLetter || rec.Status == dedup.StatusCompleted || rec.Attempts != 0 {
		t.Fatalf("record %s with %d failed runs; want it given back with no attempt charged", rec.Status, rec.Attempts)
	}
	out := logs.String()
	for _, want := range []string{"refused", "op=Complete", "dynamo_operation=UpdateItem", "update_expression=", "#status = :completed",
		"condition_expression=", "#owner = :owner", "attribute_names=", "key_hash=" + dedup.KeyHash(key)} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, id) || strings.Contains(o.Err.Error(), id) {
		t.Errorf("the key is in the log or the error:\n%s\n%v", out, o.Err)
	}
}

// A real refusal: a tenant-layout store on a table of the default layout
// sends a key DynamoDB refuses (to an UpdateItem or a GetItem; a PutItem
// takes the sort key as an attribute, which the store's Check refuses
// at start). Each call's error is a *RequestRefusedError, classed
// Misconfigured, never Permanent.
func TestRefusedRequestOfAnotherLayout(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	st := newStore(t, client, recordsTable(t, client), dynamostore.TenantLayout())
	at := clock()
	key := "acme#" + uniqueKey(t)
	l := dedup.Lease{Key: key, Owner: "o", Version: 1}
	for op, call := range map[string]func() error{
		"Complete": func() error {
			return st.Complete(t.Context(), dedup.CompleteRequest{Lease: l, Now: at(0), ExpiresAt: at(30)})
		},
		"Fail": func() error {
			return st.Fail(t.Context(), dedup.FailRequest{Lease: l, Now: at(0), RetryAt: at(30), Reason: "x"})
		},
		"Extend": func() error {
			return st.Extend(t.Context(), dedup.ExtendRequest{Lease: l, Now: at(0), LeaseUntil: at(30)})
		},
		"Get": func() error {
			_, err := st.Get(t.Context(), key)
			return err
		},
	} {
		err := call()
		var refused *dynamostore.RequestRefusedError
		if !errors.As(err, &refused) || refused.Op != op || retry.Classify(err) != retry.Misconfigured {
			t.Errorf("%s: %v (%v); want a *RequestRefusedError, misconfigured", op, err, retry.Classify(err))
		}
	}
}
