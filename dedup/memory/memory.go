// Package memory is an in-process dedup.Store with the exact semantics of
// the DynamoDB Store: the embedded default and the store of fast tests.
// Records live in the process; they survive nothing.
package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup"
)

// Write is a business write committed atomically with a Complete or
// ClaimComplete: every Check of a request runs first, and only if all pass
// does every Apply run, under a lock that serializes all such commits.
// Check returning an error cancels the commit with a
// *dedup.BusinessConditionError.
type Write struct {
	Check func() error
	Apply func()
}

const shards = 64

// Store is the in-memory dedup.Store. The zero value is not usable; call New.
type Store struct {
	seed    maphash.Seed
	shards  [shards]shard
	writeMu sync.Mutex // serializes commits that carry Writes
}

type shard struct {
	mu      sync.Mutex
	records map[string]*dedup.Record
}

// New returns an empty Store.
func New() *Store {
	s := &Store{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].records = map[string]*dedup.Record{}
	}
	return s
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%shards]
}

// Len reports how many records are stored, expired ones included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.records)
		sh.mu.Unlock()
	}
	return n
}

func clone(r *dedup.Record) *dedup.Record {
	c := *r
	c.Response = slices.Clone(r.Response)
	return &c
}

// Claim implements dedup.Store.
func (s *Store) Claim(_ context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	if req.Key == "" {
		return dedup.Claim{}, dedup.ErrEmptyKey
	}
	sh := s.shard(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := sh.records[req.Key]
	if old != nil && old.Live(req.Now) {
		return dedup.Claim{Existing: *clone(old)}, nil
	}
	rec := &dedup.Record{Key: req.Key, Status: dedup.StatusPending, Version: 1, Owner: req.Owner,
		PayloadHash: req.PayloadHash, Attempts: 1, CreatedAt: req.Now, ExpiresAt: req.LeaseUntil}
	c := dedup.Claim{Acquired: true}
	if old != nil {
		rec.Version, rec.Attempts = old.Version+1, old.Attempts+1
		c.Previous = old
	}
	sh.records[req.Key] = rec
	c.Lease = dedup.Lease{Key: req.Key, Owner: req.Owner, Version: rec.Version}
	c.Attempt = rec.Attempts
	return c, nil
}

// held returns the record the lease still fences, or ErrLeaseLost.
func held(sh *shard, l dedup.Lease) (*dedup.Record, error) {
	r := sh.records[l.Key]
	if r == nil || r.Status != dedup.StatusPending || r.Owner != l.Owner || r.Version != l.Version {
		return nil, fmt.Errorf("%w: key %q version %d", dedup.ErrLeaseLost, l.Key, l.Version)
	}
	return r, nil
}

func asWrites(ws []any) ([]Write, error) {
	out := make([]Write, len(ws))
	for i, w := range ws {
		switch w := w.(type) {
		case Write:
			out[i] = w
		case *Write:
			out[i] = *w
		default:
			return nil, fmt.Errorf("%w: %T (dedup/memory takes memory.Write)", dedup.ErrUnsupportedWrite, w)
		}
	}
	return out, nil
}

// commit runs fn, which decides under the shard lock whether the record
// side may commit, together with writes, all or nothing.
func (s *Store) commit(ws []any, key string, fn func(sh *shard) (apply func(), err error)) error {
	writes, err := asWrites(ws)
	if err != nil {
		return err
	}
	if len(writes) > 0 {
		s.writeMu.Lock()
		defer s.writeMu.Unlock()
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	apply, err := fn(sh)
	if err != nil || apply == nil {
		return err
	}
	for i, w := range writes {
		if w.Check == nil {
			continue
		}
		if err := w.Check(); err != nil {
			return &dedup.BusinessConditionError{Index: i, Reason: "ConditionalCheckFailed", Message: err.Error()}
		}
	}
	for _, w := range writes {
		if w.Apply != nil {
			w.Apply()
		}
	}
	apply()
	return nil
}

// Complete implements dedup.Store.
func (s *Store) Complete(_ context.Context, req dedup.CompleteRequest) error {
	return s.commit(req.Writes, req.Lease.Key, func(sh *shard) (func(), error) {
		r, err := held(sh, req.Lease)
		if err != nil {
			return nil, err
		}
		return func() {
			r.Status, r.Version = dedup.StatusCompleted, r.Version+1
			r.Response = slices.Clone(req.Response)
			r.ExpiresAt, r.LastError = req.ExpiresAt, ""
		}, nil
	})
}

// ClaimComplete implements dedup.ClaimCompleter.
func (s *Store) ClaimComplete(_ context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	if req.Key == "" {
		return dedup.Claim{}, dedup.ErrEmptyKey
	}
	var c dedup.Claim
	err := s.commit(req.Writes, req.Key, func(sh *shard) (func(), error) {
		old := sh.records[req.Key]
		if old != nil && old.Live(req.Now) {
			c = dedup.Claim{Existing: *clone(old)}
			return nil, nil
		}
		rec := &dedup.Record{Key: req.Key, Status: dedup.StatusCompleted, Version: 1, Owner: req.Owner,
			PayloadHash: req.PayloadHash, Attempts: 1, CreatedAt: req.Now, ExpiresAt: req.ExpiresAt,
			Response: slices.Clone(req.Response)}
		next := dedup.Claim{Acquired: true}
		if old != nil {
			rec.Version, rec.Attempts = old.Version+1, old.Attempts+1
			next.Previous = old
		}
		next.Lease = dedup.Lease{Key: req.Key, Owner: req.Owner, Version: rec.Version}
		next.Attempt = rec.Attempts
		return func() { sh.records[req.Key] = rec; c = next }, nil
	})
	return c, err
}

// Fail implements dedup.Store.
func (s *Store) Fail(_ context.Context, req dedup.FailRequest) error {
	sh := s.shard(req.Lease.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r, err := held(sh, req.Lease)
	if err != nil {
		return err
	}
	r.Status, r.Version, r.LastError, r.ExpiresAt = dedup.StatusFailed, r.Version+1, req.Reason, req.RetryAt
	if req.ResetAttempts {
		r.Attempts = 0
	}
	return nil
}

// Extend implements dedup.Store.
func (s *Store) Extend(_ context.Context, req dedup.ExtendRequest) error {
	sh := s.shard(req.Lease.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r, err := held(sh, req.Lease)
	if err != nil {
		return err
	}
	if req.LeaseUntil.After(r.ExpiresAt) {
		r.ExpiresAt = req.LeaseUntil
	}
	return nil
}

// Get implements dedup.Store.
func (s *Store) Get(_ context.Context, key string) (dedup.Record, error) {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.records[key]
	if r == nil {
		return dedup.Record{}, fmt.Errorf("%w: %q", dedup.ErrNotFound, key)
	}
	return *clone(r), nil
}

// Sweep deletes the records expired at now, as DynamoDB's TTL would, and
// returns how many; a long-running embedded worker calls it to bound
// memory. Claims never depend on it: an expired record counts as absent.
func (s *Store) Sweep(now time.Time) int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, r := range sh.records {
			if !r.Live(now) {
				delete(sh.records, k)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}
