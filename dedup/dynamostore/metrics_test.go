package dynamostore_test

import (
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/metrictest"
)

// Throttles and condition failures are counted apart: the throttles under
// their code with onceq.throttle=true, and as retries; a lost claim under
// ConditionalCheckFailedException, not a throttle, never retried.
func TestMetricsThrottlesApartFromConditions(t *testing.T) {
	reader, mp := metrictest.Provider(t)
	rig := newFaultRig(t, fastPolicy(8), dynamostore.WithMeterProvider(mp))
	st, p := rig.st, rig.proxy
	at := clock()
	k := uniqueKey(t)

	p.AddRule(faultproxy.Rule{Op: "PutItem", Times: 3, Fault: faultproxy.Throttle})
	if c, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(30)}); err != nil || !c.Acquired {
		t.Fatalf("throttled claim: %+v %v", c, err)
	}
	if c, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "b", Now: at(1), LeaseUntil: at(31)}); err != nil || c.Acquired {
		t.Fatalf("losing claim: %+v %v", c, err)
	}
	op := attribute.String("onceq.store.operation", "claim")
	if n := metrictest.Counter(t, reader, "onceq.store.errors", op, attribute.String("db.response.status_code", "ProvisionedThroughputExceededException"), attribute.Bool("onceq.throttle", true)); n != 3 {
		t.Errorf("throttle errors %d, want 3", n)
	}
	if n := metrictest.Counter(t, reader, "onceq.store.errors", op, attribute.String("db.response.status_code", "ConditionalCheckFailedException"), attribute.Bool("onceq.throttle", false)); n != 1 {
		t.Errorf("condition failures %d, want 1", n)
	}
	if n := metrictest.Counter(t, reader, "onceq.store.errors", attribute.Bool("onceq.throttle", true)); n != 3 {
		t.Errorf("all throttles %d, want 3 (a condition failure counted as one?)", n)
	}
	if n := metrictest.Counter(t, reader, "onceq.store.retries", op, attribute.String("onceq.retry.class", "throttled")); n != 3 {
		t.Errorf("throttled retries %d, want 3", n)
	}
	if n := metrictest.Counter(t, reader, "onceq.store.retries"); n != 3 {
		t.Errorf("retries %d, want 3 (a condition failure retried?)", n)
	}
}

// A business write's failed condition is counted by its cancellation
// reason; a throttled item's reason is marked a throttle and retried.
func TestMetricsCancellationReasons(t *testing.T) {
	reader, mp := metrictest.Provider(t)
	rig := newFaultRig(t, fastPolicy(5), dynamostore.WithMeterProvider(mp))
	st, p := rig.st, rig.proxy
	inv := rig.inv
	sku := uniqueName("sku-")
	inv.stock(t, sku, 10)
	at := clock()

	l := mustClaim(t, st, dedup.ClaimRequest{Key: uniqueKey(t), Owner: "a", Now: at(0), LeaseUntil: at(30)}).Lease
	var be *dedup.BusinessConditionError
	if err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: l, Now: at(1), ExpiresAt: at(99), Writes: []dedup.Write{inv.reserve(sku, 11)}}); !errors.As(err, &be) {
		t.Fatalf("short stock: %v", err)
	}
	reason := func(r string) attribute.KeyValue { return attribute.String("transact_write_cancellation_reason", r) }
	op := attribute.String("onceq.store.operation", "complete")
	if n := metrictest.Counter(t, reader, "onceq.dynamodb.transaction_cancellations", op, reason("ConditionalCheckFailed"), attribute.Bool("onceq.throttle", false)); n != 1 {
		t.Errorf("business condition cancellations %d, want 1", n)
	}

	p.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Times: 1, Fault: faultproxy.Cancel, Reasons: []string{"None", "ThrottlingError"}})
	l = mustClaim(t, st, dedup.ClaimRequest{Key: uniqueKey(t), Owner: "a", Now: at(0), LeaseUntil: at(30)}).Lease
	if err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: l, Now: at(1), ExpiresAt: at(99), Writes: []dedup.Write{inv.reserve(sku, 1)}}); err != nil {
		t.Fatalf("complete across a throttled cancellation: %v", err)
	}
	if n := metrictest.Counter(t, reader, "onceq.dynamodb.transaction_cancellations", op, reason("ThrottlingError"), attribute.Bool("onceq.throttle", true)); n != 1 {
		t.Errorf("throttled cancellations %d, want 1", n)
	}
	if n := metrictest.Counter(t, reader, "onceq.dynamodb.transaction_cancellations", reason("None")); n != 0 {
		t.Errorf("None reasons counted: %d", n)
	}
	if n := metrictest.Counter(t, reader, "onceq.store.retries", op, attribute.String("db.response.status_code", "ThrottlingError"), attribute.Bool("onceq.throttle", true)); n != 1 {
		t.Errorf("throttled transaction retries %d, want 1", n)
	}
}
