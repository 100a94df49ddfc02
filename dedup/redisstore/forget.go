package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
)

var _ dedup.Forgetter = (*Store)(nil)

// forgetScript deletes KEYS[1] if the version its value holds is ARGV[1]
// (a record is <layout><status letter><version>:...): 1 when deleted, 0
// when absent, else the version it holds, as a string.
const forgetScript = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local ver = string.match(v, '^..(%d+):')
if ver ~= ARGV[1] then return 'v' .. (ver or '?') end
redis.call('DEL', KEYS[1])
return 1`

var forget = redis.NewScript(forgetScript)

// Forget implements dedup.Forgetter, in one script: the record's version
// is compared and the record deleted at once.
func (s *Store) Forget(ctx context.Context, key string, version int64) error {
	if key == "" {
		return dedup.ErrEmptyKey
	}
	res, err := forget.Run(ctx, s.c, []string{s.redisKey(key)}, strconv.FormatInt(version, 10)).Result()
	if err != nil {
		return s.wrap("forget", err)
	}
	switch res := res.(type) {
	case int64:
		if res == 1 {
			return nil
		}
		return fmt.Errorf("redisstore: forget key_hash %s: %w", dedup.KeyHash(key), dedup.ErrNotFound)
	case string:
		return fmt.Errorf("redisstore: forget key_hash %s: %w: version %s, not %d", dedup.KeyHash(key), dedup.ErrRecordChanged, res[1:], version)
	}
	return fmt.Errorf("redisstore: forget key_hash %s: the script answered %v", dedup.KeyHash(key), res)
}
