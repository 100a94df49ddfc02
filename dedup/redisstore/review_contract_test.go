package redisstore_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/redisstore"
)

// A nil *redis.Client in the UniversalClient New takes is no client: New
// refuses it as it refuses a nil one, rather than handing out a Store
// whose first call crashes the process.
func TestReviewNewRefusesNilClient(t *testing.T) {
	var c *redis.Client
	st, err := redisstore.New(c)
	if !errors.Is(err, redisstore.ErrInvalidConfig) {
		t.Fatalf("New(nil *redis.Client) = %v, %v; want ErrInvalidConfig", st, err)
	}
}
