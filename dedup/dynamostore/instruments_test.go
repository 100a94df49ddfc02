package dynamostore_test

import (
	"testing"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/faultproxy"
)

// The DynamoDB store counts, hooks and retries as every store does: the
// shared case, with a connection reset by the fault proxy.
func TestInstruments(t *testing.T) {
	storetest.RunInstruments(t, storetest.Instrumented{
		System: storeinstr.SystemDynamoDB,
		New: func(t *testing.T, mp metric.MeterProvider, hooks ...any) (dedup.Store, func()) {
			hs := make([]dynamostore.Hook, len(hooks))
			for i, h := range hooks {
				hs[i] = h
			}
			rig := newFaultRig(t, fastPolicy(4), dynamostore.WithMeterProvider(mp), dynamostore.WithHooks(hs...))
			return rig.st, func() { rig.proxy.AddRule(faultproxy.Rule{Op: "PutItem", Times: 1, Fault: faultproxy.Reset}) }
		},
	})
}
