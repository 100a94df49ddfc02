package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/outbox"
)

// KeyHashSearch is what FindKeyHash found and what it read: Scanned
// counts the Redis keys under the prefix read (Unit says so), and
// Exhausted whether every one was; Unmatchable is always 0. A record does not store its key (its
// Redis key holds the key's SHA-256), so Records' Key is "", and
// HashedKeys says so. Metered and ReadUnits stay zero: Redis bills no
// reads.
type KeyHashSearch = dedup.KeyHashSearch

var _ dedup.Inspector = (*Store)(nil)

// FindKeyHash looks for the records whose key has dedup.KeyHash keyHash
// (12 hex digits): the key_hash that logs and error texts carry. A
// record's Redis key holds its key's SHA-256, whose first 12 hex digits
// are that hash, so this SCANs the names under the prefix, at most about
// limit of them, and reads the records whose name matches; nothing is
// written. On a Cluster every primary is scanned. It implements
// dedup.Inspector.
func (s *Store) FindKeyHash(ctx context.Context, keyHash string, limit int) (KeyHashSearch, error) {
	res := KeyHashSearch{Unit: "key"}
	if len(keyHash) != 12 || strings.Trim(keyHash, "0123456789abcdef") != "" {
		return res, s.wrap("find-key-hash", fmt.Errorf("%w: key hash %q, want 12 lowercase hex digits", ErrInvalidConfig, keyHash))
	}
	if limit < 1 {
		return res, s.wrap("find-key-hash", fmt.Errorf("%w: scan limit %d, want at least 1", ErrInvalidConfig, limit))
	}
	want := s.prefix + "{" + keyHash
	var names []string
	scanned, exhausted, err := s.scan(ctx, limit, func(name string) {
		if strings.HasPrefix(name, want) {
			names = append(names, name)
		}
	})
	res.Scanned, res.Exhausted = scanned, exhausted
	if err != nil {
		return res, s.wrap("find-key-hash", err)
	}
	for _, name := range names {
		v, err := s.c.Get(ctx, name).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired since the scan
		}
		if err != nil {
			return res, s.wrap("find-key-hash", err)
		}
		r, err := decode("", v)
		if err != nil {
			// The record's key is not stored; its key hash is the one sought.
			var ce *dedup.CorruptRecordError
			if errors.As(err, &ce) {
				ce.KeyHash = keyHash
			}
			return res, err
		}
		r.KeyHash = keyHash
		res.Records = append(res.Records, *r)
	}
	return res, nil
}

// RecordSample is what CheckRecords read.
type RecordSample struct {
	// Scanned counts the Redis keys under the prefix read.
	Scanned int
	// Layouts counts the records by their layout byte ('1', or '2' for a
	// record with takeovers).
	Layouts map[byte]int
	// Foreign counts the keys under the prefix that hold no onceq record:
	// another type (a hash, a list), or a string of another layout (a
	// newer onceq's, or another program's). FirstForeign names one, as
	// its Redis key (a hash of the record's key, never the key).
	Foreign      int
	FirstForeign string
}

// CheckRecords reads about limit of the keys under the prefix and says
// whether each holds a record this version reads: another program
// sharing the prefix, or a newer onceq's layout, shows as Foreign.
func (s *Store) CheckRecords(ctx context.Context, limit int) (RecordSample, error) {
	res := RecordSample{Layouts: map[byte]int{}}
	if limit < 1 {
		return res, s.wrap("check-records", fmt.Errorf("%w: limit %d, want at least 1", ErrInvalidConfig, limit))
	}
	var names []string
	scanned, _, err := s.scan(ctx, limit, func(name string) { names = append(names, name) })
	res.Scanned = scanned
	if err != nil {
		return res, s.wrap("check-records", err)
	}
	foreign := func(name string) {
		if res.Foreign == 0 {
			res.FirstForeign = name
		}
		res.Foreign++
	}
	cmds := make([]*redis.StringCmd, len(names))
	if _, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			cmds[i] = p.Get(ctx, name)
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) {
		return res, s.wrap("check-records", err)
	}
	for i, cmd := range cmds {
		v, err := cmd.Result()
		switch {
		case errors.Is(err, redis.Nil):
			// expired since the scan
		case isWrongType(err):
			foreign(names[i])
		case err != nil:
			return res, s.wrap("check-records", err)
		default:
			if _, err := decode("", v); err != nil {
				foreign(names[i])
			} else {
				res.Layouts[v[0]]++
			}
		}
	}
	return res, nil
}

func isWrongType(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

// scan calls each with the name of every key under the prefix, SCANning
// until about limit names were read or every key was; it returns how
// many were read and whether that was all.
func (s *Store) scan(ctx context.Context, limit int, each func(name string)) (int, bool, error) {
	match := globEscape(s.prefix) + "*"
	var mu sync.Mutex // a Cluster's primaries are scanned at once
	n, exhausted := 0, true
	node := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			mu.Lock()
			left := limit - n
			mu.Unlock()
			if left <= 0 {
				mu.Lock()
				exhausted = false
				mu.Unlock()
				return nil
			}
			names, next, err := c.Scan(ctx, cursor, match, int64(min(left, 1000))).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, name := range names {
				n++
				each(name)
			}
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	var err error
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return node(ctx, c) })
	} else {
		err = node(ctx, s.c)
	}
	return n, exhausted, err
}

// globEscape quotes the characters SCAN's MATCH pattern gives a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// listBatch is how many records List reads in one pipeline.
const listBatch = 500

// List implements dedup.Inspector: it SCANs every name under the prefix
// and reads the records, a pipeline at a time, until f.Limit match; they
// come in no order, with Key "" (Redis keeps the key's SHA-256). Redis
// cannot list by tenant, as it keeps no key: that is an error wrapping
// dedup.ErrCannotList.
func (s *Store) List(ctx context.Context, f dedup.ListFilter) ([]dedup.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, s.wrap("list", fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	if f.Tenant != "" {
		return nil, s.wrap("list", fmt.Errorf("%w: by tenant: Redis keeps each key's SHA-256, not the key", dedup.ErrCannotList))
	}
	var names []string
	if _, _, err := s.scan(ctx, math.MaxInt, func(name string) { names = append(names, name) }); err != nil {
		return nil, s.wrap("list", err)
	}
	var out []dedup.Record
	for len(names) > 0 && len(out) < f.Limit {
		batch := names[:min(len(names), listBatch)]
		names = names[len(batch):]
		cmds := make([]*redis.StringCmd, len(batch))
		if _, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, name := range batch {
				cmds[i] = p.Get(ctx, name)
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) {
			return nil, s.wrap("list", err)
		}
		for i, cmd := range cmds {
			v, err := cmd.Result()
			if err != nil {
				continue // expired since the scan, or not a record
			}
			r, err := decode("", v)
			if err != nil {
				continue // not a record this version reads (check says so)
			}
			r.KeyHash = s.keyHashOf(batch[i])
			if f.Selects(*r) && len(out) < f.Limit {
				out = append(out, *r)
			}
		}
	}
	return out, nil
}

// OutboxEntries implements dedup.Inspector: the Redis store keeps no
// outbox, so it is an error wrapping dedup.ErrNoOutbox.
func (s *Store) OutboxEntries(context.Context, outbox.State, int) ([]outbox.Entry, error) {
	return nil, s.wrap("outbox-entries", dedup.ErrNoOutbox)
}

// keyHashOf is the key_hash of the record named name: the first digits
// of the key's SHA-256 the name holds ("" for a name of another form).
func (s *Store) keyHashOf(name string) string {
	h, ok := strings.CutPrefix(name, s.prefix+"{")
	if !ok || len(h) < len(dedup.KeyHash("k")) {
		return ""
	}
	return h[:len(dedup.KeyHash("k"))]
}
