package cache

import (
	"context"
	"errors"
	"hash/maphash"
	"math/bits"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup"
)

// Defaults bound the cache modestly.
const (
	DefaultEntries = 10_000
	DefaultBytes   = 16 << 20
	// DefaultMaxAge bounds how long an entry may disagree with the store
	// (a record deleted, rewritten or re-claimed behind the cache).
	DefaultMaxAge = 10 * time.Second
)

// Option tunes a cache made by New or Wrap.
type Option interface{ apply(*Cache) }

type optionFunc func(*Cache)

func (f optionFunc) apply(c *Cache) { f(c) }

// MaxAge is how long an entry is used after it was cached, at most (and
// never past its record's expiry): the bound on how long the cache can
// disagree with the store, which it never asks again meanwhile. Zero or
// less takes DefaultMaxAge.
func MaxAge(d time.Duration) Option {
	return optionFunc(func(c *Cache) {
		if d > 0 {
			c.maxAge = d
		}
	})
}

// Stats counts what the cache did.
type Stats struct {
	Hits, Misses, Evictions int64
	Entries                 int
	Bytes                   int
}

// Cache holds COMPLETED records in process memory, by the key they
// answer for.
//
// The records are spread over shards, each with its own lock, so that
// workers looking up different keys do not wait for one another; each
// shard holds its share of the bounds and evicts by the clock
// (second-chance) rule, an approximation of least recently used whose
// lookups write one flag instead of relinking a list.
type Cache struct {
	seed   maphash.Seed
	shards []shard
	mask   uint64
	maxAge time.Duration
}

type shard struct {
	mu sync.Mutex
	// index finds a key's entry by the key's hash (the entry's own key
	// is compared on a hit): hashing a key once serves the shard and the
	// map, and an integer key costs the map little. Two keys of one hash
	// share an entry, the later evicting the earlier: a miss, never a
	// wrong answer.
	index      map[uint64]int32
	entries    []entry // reused in place: a put allocates nothing once they are made
	free       []int32 // entries not in use
	hand       int     // the clock's hand over entries
	bytes      int
	maxEntries int
	maxBytes   int
	// The counters are the shard's, under its lock: counters shared by
	// all shards would move one cache line between cores on every lookup.
	hits, misses, evictions int64
	_                       [64]byte // keeps neighbouring shards' locks off one cache line
}

type entry struct {
	rec dedup.Record
	// until is when the entry stops answering: the record's expiry, or
	// its caching time plus the cache's MaxAge, whichever is first.
	until  time.Time
	hash   uint64 // of rec.Key
	size   int
	used   bool
	recent bool // looked up since the hand last passed
}

// Shards hold at least this many entries and bytes each, so that a small
// cache keeps its bounds exactly and a large record still fits a shard.
const (
	maxShards       = 32
	minShardEntries = 64
	minShardBytes   = 512 << 10
)

// New returns a cache of at most maxEntries records and maxBytes bytes
// (keys and responses); zero or less takes the default. It returns an
// error as every onceq constructor does; none of its arguments is refused
// today.
func New(maxEntries, maxBytes int, opts ...Option) (*Cache, error) {
	return newCache(maxEntries, maxBytes, opts), nil
}

// newCache is New, for Wrap too.
func newCache(maxEntries, maxBytes int, opts []Option) *Cache {
	if maxEntries <= 0 {
		maxEntries = DefaultEntries
	}
	if maxBytes <= 0 {
		maxBytes = DefaultBytes
	}
	n := min(maxShards, maxEntries/minShardEntries, maxBytes/minShardBytes)
	n = 1 << max(bits.Len(uint(max(n, 1)))-1, 0) // a power of two, at least 1
	c := &Cache{seed: maphash.MakeSeed(), shards: make([]shard, n), mask: uint64(n - 1), maxAge: DefaultMaxAge}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.maxEntries, sh.maxBytes = maxEntries/n, maxBytes/n
		sh.index = make(map[uint64]int32, sh.maxEntries)
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	return c
}

// shardOf returns key's shard and hash.
func (c *Cache) shardOf(key string) (*shard, uint64) {
	h := maphash.String(c.seed, key)
	return &c.shards[h&c.mask], h
}

// Stats reports the counters.
func (c *Cache) Stats() Stats {
	var st Stats
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		st.Hits += sh.hits
		st.Misses += sh.misses
		st.Evictions += sh.evictions
		st.Entries += len(sh.index)
		st.Bytes += sh.bytes
		sh.mu.Unlock()
	}
	return st
}

// Get returns the cached COMPLETED record of key if it is still live at
// now, and counts the hit or the miss. A lookup allocates nothing.
func (c *Cache) Get(key string, now time.Time) (dedup.Record, bool) {
	sh, h := c.shardOf(key)
	sh.mu.Lock()
	i, ok := sh.index[h]
	ok = ok && sh.entries[i].rec.Key == key
	r, live := sh.liveLocked(i, ok, now)
	if live {
		sh.hits++
	} else {
		sh.misses++
	}
	sh.mu.Unlock()
	return r, live
}

// liveLocked returns entry i's record if it is live at now (found says
// whether the key had an entry at all); an expired one is dropped.
func (sh *shard) liveLocked(i int32, found bool, now time.Time) (dedup.Record, bool) {
	if !found {
		return dedup.Record{}, false
	}
	e := &sh.entries[i]
	if now.After(e.until) {
		sh.removeLocked(i)
		return dedup.Record{}, false
	}
	e.recent = true
	return e.rec, true
}

// Put caches r, a record known at now, as the answer for key: the key the
// caller asked for, not r.Key as the store read it back (a store may hold
// a key as its hash, which another key could spell out). Only a COMPLETED
// record still live at now is cached; any other is ignored.
func (c *Cache) Put(key string, r dedup.Record, now time.Time) {
	if r.Status != dedup.StatusCompleted || !r.Live(now) {
		return
	}
	r.Key = key
	sh, h := c.shardOf(r.Key)
	size := len(r.Key) + len(r.Response) + len(r.PayloadHash) + 64
	if size > sh.maxBytes {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i, ok := sh.index[h]; ok {
		sh.removeLocked(i)
	}
	for len(sh.index) >= sh.maxEntries || sh.bytes+size > sh.maxBytes {
		sh.evictLocked()
		sh.evictions++
	}
	var i int32
	if n := len(sh.free); n > 0 {
		i, sh.free = sh.free[n-1], sh.free[:n-1]
	} else {
		i = int32(len(sh.entries))
		sh.entries = append(sh.entries, entry{})
	}
	// In cold: an entry earns its second chance by a lookup, so that a
	// run of keys never seen again passes through without the hand
	// sweeping every entry to make room.
	until := r.ExpiresAt
	if fresh := now.Add(c.maxAge); fresh.Before(until) {
		until = fresh
	}
	sh.entries[i] = entry{rec: r, until: until, hash: h, size: size, used: true}
	sh.index[h] = i
	sh.bytes += size
}

// evictLocked removes one entry: the first in the hand's way not looked
// up since the hand last passed it.
func (sh *shard) evictLocked() {
	for {
		if sh.hand >= len(sh.entries) {
			sh.hand = 0
		}
		i := sh.hand
		sh.hand++
		e := &sh.entries[i]
		switch {
		case !e.used:
		case e.recent:
			e.recent = false
		default:
			sh.removeLocked(int32(i))
			return
		}
	}
}

func (sh *shard) removeLocked(i int32) {
	e := &sh.entries[i]
	delete(sh.index, e.hash)
	sh.bytes -= e.size
	*e = entry{} // lets go of the key and response
	sh.free = append(sh.free, i)
}

// Store is a dedup.Store with a Cache in front: a claim of a key whose
// COMPLETED record the cache holds is answered with no call to the Store
// behind, and what that Store answers or completes is cached. It declares
// the Capabilities of the Store behind, and so hands over its views (its
// outbox, its offset rows, its Inspector) with no method of its own.
type Store struct {
	cache *Cache
	next  dedup.Store
	// leases remember the payload hash of each lease this Store granted,
	// by the key's hash, so that its Complete can be cached with it; they
	// are sharded as the cache is.
	leases []leaseShard
}

type leaseShard struct {
	mu sync.Mutex
	m  map[uint64]leaseHash
	_  [64]byte
}

type leaseHash struct {
	lease dedup.Lease
	hash  string
}

// Wrap puts a cache of at most maxEntries records and maxBytes bytes (keys
// and responses) in front of next; zero or less takes the default.
func Wrap(next dedup.Store, maxEntries, maxBytes int, opts ...Option) *Store {
	s := &Store{cache: newCache(maxEntries, maxBytes, opts), next: next}
	s.leases = make([]leaseShard, len(s.cache.shards))
	for i := range s.leases {
		s.leases[i].m = map[uint64]leaseHash{}
	}
	return s
}

// leasesOf returns the shard of key's lease and key's hash.
func (s *Store) leasesOf(key string) (*leaseShard, uint64) {
	_, h := s.cache.shardOf(key)
	return &s.leases[h&s.cache.mask], h
}

// Stats reports the cache's counters.
func (s *Store) Stats() Stats { return s.cache.Stats() }

// Claim implements dedup.Store.
func (s *Store) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	if r, ok := s.cache.Get(req.Key, req.Now); ok {
		return dedup.Claim{Existing: r}, nil
	}
	c, err := s.next.Claim(ctx, req)
	switch {
	case err != nil:
	case c.Acquired:
		ls, h := s.leasesOf(req.Key)
		ls.mu.Lock()
		if len(ls.m) >= 4*max(s.cache.shards[0].maxEntries, 1) {
			// Leases claimed through this Store but never settled through
			// it: forget them rather than grow.
			clear(ls.m)
		}
		ls.m[h] = leaseHash{c.Lease, req.PayloadHash}
		ls.mu.Unlock()
	default:
		s.cache.Put(req.Key, c.Existing, req.Now)
	}
	return c, err
}

// forget drops the remembered hash of a lease and returns it.
func (s *Store) forget(l dedup.Lease) (string, bool) {
	ls, h := s.leasesOf(l.Key)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	lh, ok := ls.m[h]
	if !ok || lh.lease != l {
		return "", false // another lease of the key, or of a key of the same hash
	}
	delete(ls.m, h)
	return lh.hash, true
}

// Complete implements dedup.Store.
func (s *Store) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	err := s.next.Complete(ctx, req)
	var business *dedup.BusinessConditionError
	if errors.As(err, &business) {
		return err // the lease is still held: a second Complete follows
	}
	hash, ok := s.forget(req.Lease)
	if err == nil && ok {
		s.cache.Put(req.Lease.Key, dedup.Record{Key: req.Lease.Key, Status: dedup.StatusCompleted, Version: req.Lease.Version + 1,
			Owner: req.Lease.Owner, PayloadHash: hash, Response: req.Response, CreatedAt: req.Now, ExpiresAt: req.ExpiresAt}, req.Now)
	}
	return err
}

// Fail implements dedup.Store.
func (s *Store) Fail(ctx context.Context, req dedup.FailRequest) error {
	s.forget(req.Lease)
	return s.next.Fail(ctx, req)
}

// Extend implements dedup.Store.
func (s *Store) Extend(ctx context.Context, req dedup.ExtendRequest) error {
	return s.next.Extend(ctx, req)
}

// Check implements dedup.Store: it checks the Store behind.
func (s *Store) Check(ctx context.Context) error { return s.next.Check(ctx) }

// Get implements dedup.Store. It always reads the store: Get is for
// operators, who want the truth, not the cache.
func (s *Store) Get(ctx context.Context, key string) (dedup.Record, error) {
	return s.next.Get(ctx, key)
}

// Capabilities implements dedup.Store: those of the Store behind, which
// the cache passes every call on to, views included: the relay, batch
// mode and an operator's tool read the Store behind, never the cache.
func (s *Store) Capabilities() dedup.Capabilities { return s.next.Capabilities() }

// Attach implements dedup.Store: it attaches the Store behind.
func (s *Store) Attach(rt dedup.Runtime) { s.next.Attach(rt) }

// ClaimComplete implements dedup.Store.
func (s *Store) ClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	if r, ok := s.cache.Get(req.Key, req.Now); ok {
		return dedup.Claim{Existing: r}, nil
	}
	cl, err := s.next.ClaimComplete(ctx, req)
	switch {
	case err != nil:
	case cl.Acquired:
		s.cache.Put(req.Key, dedup.Record{Key: req.Key, Status: dedup.StatusCompleted, Version: cl.Lease.Version, Owner: req.Owner,
			PayloadHash: req.PayloadHash, Response: req.Response, Attempts: cl.Attempt, CreatedAt: req.Now, ExpiresAt: req.ExpiresAt}, req.Now)
	default:
		s.cache.Put(req.Key, cl.Existing, req.Now)
	}
	return cl, err
}
