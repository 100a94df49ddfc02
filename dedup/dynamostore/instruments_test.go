package dynamostore_test

import (
	"testing"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
)

// The DynamoDB store counts, hooks and retries as every store does: the
// shared case, with connections reset by the fault proxy (before and
// after DynamoDB carried the request out).
func TestInstruments(t *testing.T) {
	storetest.RunInstruments(t, storetest.Instrumented{
		System: storeinstr.SystemDynamoDB,
		New: func(t *testing.T, mp metric.MeterProvider, hooks ...storeinstr.Hook) (dedup.Store, storetest.Faults) {
			rig := newFaultRig(t, fastPolicy(4), dynamostore.WithMeterProvider(mp), dynamostore.WithHooks(hooks...))
			requests := map[string]string{storeinstr.OpClaim: "PutItem", storeinstr.OpComplete: "UpdateItem"}
			return rig.st, storetest.Faults{
				Cut: func() { rig.proxy.AddRule(faultproxy.Rule{Op: "PutItem", Times: 1, Fault: faultproxy.Reset}) },
				LoseReply: func(op string) {
					rig.proxy.AddRule(faultproxy.Rule{Op: requests[op], Times: 1, Fault: faultproxy.Reset, After: true})
				},
			}
		},
	})
}
