package dynamostore

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/outbox"
)

// WithClockCheck undoes WithoutClockCheck, for the tests of the check: the
// tests' store helper turns it off, as their clocks are their own.
func WithClockCheck() Option { return optionFunc(func(c *config) { c.noClockCheck = false }) }

// ItemKey is the primary key of key's record in s's table, for tests that
// write items by hand.
func (s *Store) ItemKey(key string) (map[string]types.AttributeValue, error) {
	return s.layout.key(key)
}

// PendingShard is the pending index's partition of an ordered lane, for
// tests that put two lanes in one.
func PendingShard(destination, orderingKey string) string {
	return pendingShard(laneKey("", outbox.Message{Destination: destination, OrderingKey: orderingKey}))
}

// OutboxShards is how many shards the pending index spreads lanes over.
const OutboxShards = outboxShards
