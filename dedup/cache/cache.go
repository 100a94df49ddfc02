package cache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/dedup"
)

// Defaults bound the cache modestly.
const (
	DefaultEntries = 10_000
	DefaultBytes   = 16 << 20
)

// Stats counts what the cache did.
type Stats struct {
	Hits, Misses, Evictions int64
	Entries                 int
	Bytes                   int
}

// Store is a dedup.Store with a COMPLETED-record cache in front.
type Store struct {
	next       dedup.Store
	maxEntries int
	maxBytes   int

	mu      sync.Mutex
	lru     entry // sentinel of the recency ring: lru.next is the most recent
	entries map[string]*entry
	bytes   int
	// hashes remembers the payload hash of leases this Store granted, so
	// that their Complete can be cached with it.
	hashes map[dedup.Lease]string

	hits, misses, evictions atomic.Int64
}

// entry is a cached record and its place in the recency ring; the links
// live in the entry so that a put costs one allocation.
type entry struct {
	rec        dedup.Record
	size       int
	prev, next *entry
}

func (s *Store) unlinkLocked(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (s *Store) pushFrontLocked(e *entry) {
	e.prev, e.next = &s.lru, s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}

// Cache is a dedup.Store with a COMPLETED-record cache in front. It is a
// dedup.ClaimCompleter exactly when the Store behind it is one.
type Cache interface {
	dedup.Store
	Stats() Stats
	Unwrap() dedup.Store
}

// Wrap puts a cache of at most maxEntries records and maxBytes bytes (keys
// and responses) in front of next; zero or less takes the default.
func Wrap(next dedup.Store, maxEntries, maxBytes int) Cache {
	s := newStore(next, maxEntries, maxBytes)
	if cc, ok := next.(dedup.ClaimCompleter); ok {
		return &completerStore{Store: s, next: cc}
	}
	return s
}

func newStore(next dedup.Store, maxEntries, maxBytes int) *Store {
	if maxEntries <= 0 {
		maxEntries = DefaultEntries
	}
	if maxBytes <= 0 {
		maxBytes = DefaultBytes
	}
	s := &Store{next: next, maxEntries: maxEntries, maxBytes: maxBytes,
		entries: map[string]*entry{}, hashes: map[dedup.Lease]string{}}
	s.lru.prev, s.lru.next = &s.lru, &s.lru
	return s
}

// Unwrap returns the Store behind the cache.
func (s *Store) Unwrap() dedup.Store { return s.next }

// Stats reports the counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	n, b := len(s.entries), s.bytes
	s.mu.Unlock()
	return Stats{Hits: s.hits.Load(), Misses: s.misses.Load(), Evictions: s.evictions.Load(), Entries: n, Bytes: b}
}

// hit answers a claim of key at now from the cache, when it holds a record
// still live then, and counts the hit or the miss: Claim and ClaimComplete
// look up alike.
func (s *Store) hit(key string, now time.Time) (dedup.Claim, bool) {
	if r, ok := s.lookup(key, now); ok {
		s.hits.Add(1)
		return dedup.Claim{Existing: r}, true
	}
	s.misses.Add(1)
	return dedup.Claim{}, false
}

// lookup returns the cached record of key if it is still live at now.
func (s *Store) lookup(key string, now time.Time) (dedup.Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok {
		return dedup.Record{}, false
	}
	if !e.rec.Live(now) {
		s.removeLocked(e)
		return dedup.Record{}, false
	}
	s.unlinkLocked(e)
	s.pushFrontLocked(e)
	return e.rec, true
}

func (s *Store) put(r dedup.Record) {
	if r.Status != dedup.StatusCompleted {
		return
	}
	size := len(r.Key) + len(r.Response) + len(r.PayloadHash) + 64
	if size > s.maxBytes {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.entries[r.Key]; ok {
		s.removeLocked(old)
	}
	e := &entry{rec: r, size: size}
	s.entries[r.Key] = e
	s.pushFrontLocked(e)
	s.bytes += size
	for len(s.entries) > s.maxEntries || s.bytes > s.maxBytes {
		s.removeLocked(s.lru.prev)
		s.evictions.Add(1)
	}
}

func (s *Store) removeLocked(e *entry) {
	s.unlinkLocked(e)
	delete(s.entries, e.rec.Key)
	s.bytes -= e.size
}

// Claim implements dedup.Store.
func (s *Store) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	if c, ok := s.hit(req.Key, req.Now); ok {
		return c, nil
	}
	c, err := s.next.Claim(ctx, req)
	if err != nil {
		return c, err
	}
	if c.Acquired {
		s.mu.Lock()
		if len(s.hashes) >= 4*s.maxEntries {
			// Leases claimed through this Store but never settled through
			// it: forget them rather than grow.
			clear(s.hashes)
		}
		s.hashes[c.Lease] = req.PayloadHash
		s.mu.Unlock()
	} else {
		s.put(c.Existing)
	}
	return c, nil
}

// forget drops the remembered hash of a lease and returns it.
func (s *Store) forget(l dedup.Lease) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.hashes[l]
	delete(s.hashes, l)
	return h, ok
}

// Complete implements dedup.Store.
func (s *Store) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	err := s.next.Complete(ctx, req)
	if isBusiness(err) {
		return err // the lease is still held: a second Complete follows
	}
	hash, ok := s.forget(req.Lease)
	if err == nil && ok {
		s.put(dedup.Record{Key: req.Lease.Key, Status: dedup.StatusCompleted, Version: req.Lease.Version + 1,
			Owner: req.Lease.Owner, PayloadHash: hash, Response: req.Response, CreatedAt: req.Now, ExpiresAt: req.ExpiresAt})
	}
	return err
}

// isBusiness reports a *dedup.BusinessConditionError; the errors.As
// target escapes, so it is only made when there is an error.
func isBusiness(err error) bool {
	if err == nil {
		return false
	}
	var business *dedup.BusinessConditionError
	return errors.As(err, &business)
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

type completerStore struct {
	*Store
	next dedup.ClaimCompleter
}

// ClaimComplete implements dedup.ClaimCompleter.
func (c *completerStore) ClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	if cl, ok := c.hit(req.Key, req.Now); ok {
		return cl, nil
	}
	cl, err := c.next.ClaimComplete(ctx, req)
	switch {
	case err != nil:
	case cl.Acquired:
		c.put(dedup.Record{Key: req.Key, Status: dedup.StatusCompleted, Version: cl.Lease.Version, Owner: req.Owner,
			PayloadHash: req.PayloadHash, Response: req.Response, Attempts: cl.Attempt, CreatedAt: req.Now, ExpiresAt: req.ExpiresAt})
	default:
		c.put(cl.Existing)
	}
	return cl, err
}
