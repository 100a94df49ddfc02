package redisstore_test

import (
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
