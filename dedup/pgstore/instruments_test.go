package pgstore_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/retry"
)

// The PostgreSQL store counts, hooks and retries as every store does: the
// shared case, with its connection to the server cut by a proxy.
func TestInstruments(t *testing.T) {
	table := recordsTable(t, pool(t))
	storetest.RunInstruments(t, storetest.Instrumented{
		System: storeinstr.SystemPostgreSQL,
		New: func(t *testing.T, mp metric.MeterProvider, hooks ...storeinstr.Hook) (dedup.Store, storetest.Faults) {
			db, proxy := proxiedPool(t)
			st := newStore(t, db, table, pgstore.WithMeterProvider(mp), pgstore.WithHooks(hooks...),
				pgstore.WithRetryPolicy(retry.Policy{Initial: time.Millisecond, Max: 10 * time.Millisecond, MaxAttempts: 4}))
			return st, storetest.Faults{Cut: func() { proxy.CutNext(1) }, LoseReply: func(string) { proxy.LoseReplyNext(1) }}
		},
	})
}
