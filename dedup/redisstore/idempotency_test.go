package redisstore_test

import (
	"os"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/idempotency/idemtest"
)

// The Idempotency-Key middleware over Redis, which commits no business
// writes: the suite counts the handler's runs.
func TestIdempotencyKey(t *testing.T) {
	c := client(t, nil)
	idemtest.Run(t, func(t *testing.T) dedup.Store { return open(t, c, redisstore.Prefix(prefix())) })
}

// A server killed with SIGKILL mid-request, then restarted: the retry
// takes the dead server's key over, or gets its committed response.
func TestIdempotencyKeyServerKilled(t *testing.T) {
	idemtest.RunKilled(t, idemtest.Killed{
		Setup: func(t *testing.T) { t.Setenv("ONCEQ_IDEMTEST_PREFIX", prefix()) },
		Store: func(t *testing.T) dedup.Store {
			return open(t, client(t, nil), redisstore.Prefix(os.Getenv("ONCEQ_IDEMTEST_PREFIX")))
		},
	})
}
