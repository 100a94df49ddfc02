package dynamostore

import "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

// WithClockCheck undoes WithoutClockCheck, for the tests of the check: the
// tests' store helper turns it off, as their clocks are their own.
func WithClockCheck() Option { return optionFunc(func(c *config) { c.noClockCheck = false }) }

// ItemKey is the primary key of key's record in s's table, for tests that
// write items by hand.
func (s *Store) ItemKey(key string) (map[string]types.AttributeValue, error) {
	return s.layout.key(key)
}
