package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
)

// The Redis store counts, hooks and retries as every store does: the
// shared case, with its connection to Redis cut by a proxy. go-redis's
// own retries are off, so that the store's policy meets the fault.
func TestInstruments(t *testing.T) {
	storetest.RunInstruments(t, storetest.Instrumented{
		System: storeinstr.SystemRedis,
		New: func(t *testing.T, mp metric.MeterProvider, hooks ...storeinstr.Hook) (dedup.Store, storetest.Faults) {
			proxy := faultproxy.NewTCP(t, testenv.RedisAddr(t))
			c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, PoolSize: 1})
			t.Cleanup(func() { _ = c.Close() })
			st := open(t, c, redisstore.Prefix(prefix()), redisstore.WithMeterProvider(mp), redisstore.WithHooks(hooks...),
				redisstore.WithRetryPolicy(retry.Policy{Initial: time.Millisecond, Max: 10 * time.Millisecond, MaxAttempts: 4}))
			return st, storetest.Faults{Cut: func() { proxy.CutNext(1) }, LoseReply: func(string) { proxy.LoseReplyNext(1) }}
		},
	})
}
