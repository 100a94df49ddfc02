package memstore

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

// Kind is the kind of business write the Store commits: Write's.
const Kind dedup.WriteKind = "memstore"

// WriteKind implements dedup.Write.
func (Write) WriteKind() dedup.WriteKind { return Kind }

const shards = 256

// Store is the in-memory dedup.Store. The zero value is not usable; call New.
type Store struct {
	// hash is the key's 64-bit hash, computed once per call for both its
	// shard and its place in the shard's map (a map keyed by the string
	// would hash the key again on each lookup and insert).
	hash    func(key string) uint64
	shards  [shards]shard
	writeMu sync.Mutex // serializes commits that carry Writes
	// maxResponse bounds a stored response (MaxResponseSize).
	maxResponse int
	// rows are the offset rows of batch mode (Offsets).
	rows offsetTable
	// outbox holds the outgoing messages commits keep (Outbox).
	outbox outboxLog
}

// Option configures a Store.
type Option interface{ apply(*Store) }

type optionFunc func(*Store)

func (f optionFunc) apply(s *Store) { f(s) }

// MaxResponseSize sets the longest response the Store keeps, in bytes
// (default dedup.DefaultMaxResponseSize; n <= 0 keeps the default). A
// longer one is refused by Complete and ClaimComplete with a
// *dedup.ResponseTooLargeError, and nothing is committed.
func MaxResponseSize(n int) Option {
	return optionFunc(func(s *Store) {
		if n > 0 {
			s.maxResponse = n
		}
	})
}

type shard struct {
	mu sync.Mutex
	// records holds each key's entry under the key's hash; keys whose
	// hashes collide share a chain through next.
	records map[uint64]*entry
	n       int // entries in records, chains counted whole
	// slab is where new entries are made, a run at a time: one allocation
	// per entry would be one per claim.
	slab []entry
	// responses is where small responses are copied, a run at a time, for
	// the same reason: one allocation per response would be one per
	// commit.
	responses []byte
	_         [64]byte // keeps neighbouring shards' locks off one cache line
}

type entry struct {
	rec  dedup.Record
	next *entry
}

const slabRecords = 32

// newEntryLocked returns a zero entry from the shard's slab.
func (sh *shard) newEntryLocked() *entry {
	if len(sh.slab) == 0 {
		sh.slab = make([]entry, slabRecords)
	}
	e := &sh.slab[0]
	sh.slab = sh.slab[1:]
	return e
}

// Responses of up to responseRunMax bytes are copied into runs of
// responseRun bytes; a longer one gets an allocation of its own. A run is
// kept while any record still holds a response in it, so that a run
// outlives its records by at most responseRun bytes per record kept.
// A short response then costs no allocation of its own, where a copy of
// each would cost one a message: BenchmarkClaimComplete (in
// responses_test.go) and the consumer's BenchmarkMemoryPipeline keep it;
// the figures are in BENCHMARKS.md.
const (
	responseRun    = 1 << 10
	responseRunMax = 128
)

// keepLocked returns the shard's own copy of resp, for a record to hold.
func (sh *shard) keepLocked(resp []byte) []byte {
	if len(resp) == 0 || len(resp) > responseRunMax {
		return slices.Clone(resp)
	}
	if cap(sh.responses)-len(sh.responses) < len(resp) {
		sh.responses = make([]byte, 0, responseRun)
	}
	start := len(sh.responses)
	sh.responses = append(sh.responses, resp...)
	return sh.responses[start:len(sh.responses):len(sh.responses)] // full: an append to it copies
}

// findLocked returns key's record, nil when the shard has none.
func (sh *shard) findLocked(h uint64, key string) *dedup.Record {
	for e := sh.records[h]; e != nil; e = e.next {
		if e.rec.Key == key {
			return &e.rec
		}
	}
	return nil
}

// claimLocked writes key's record as a winning claim writes it (see
// succeed), over old (key's record, nil when it has none), and returns the
// Claim. A taken-over record is rewritten in place; the Claim's Previous
// is a copy of what it held.
func (sh *shard) claimLocked(h uint64, old *dedup.Record, key, owner, payloadHash string, status dedup.Status, now, expires time.Time) (*dedup.Record, dedup.Claim) {
	if old != nil {
		return succeed(old, clone(old), key, owner, payloadHash, status, now, expires)
	}
	e := sh.newEntryLocked()
	e.next = sh.records[h]
	sh.records[h] = e
	sh.n++
	return succeed(&e.rec, nil, key, owner, payloadHash, status, now, expires)
}

// New returns an empty Store. It returns an error as every store's New
// does, so that opening one store reads as opening another; no option of
// this package is refused today.
func New(opts ...Option) (*Store, error) {
	seed := maphash.MakeSeed()
	s := &Store{hash: func(key string) uint64 { return maphash.String(seed, key) }, maxResponse: dedup.DefaultMaxResponseSize}
	for _, o := range opts {
		if o != nil {
			o.apply(s)
		}
	}
	for i := range s.shards {
		s.shards[i].records = map[uint64]*entry{}
	}
	return s, nil
}

// locate returns key's hash and its shard.
func (s *Store) locate(key string) (uint64, *shard) {
	h := s.hash(key)
	return h, &s.shards[h%shards]
}

// Len reports how many records are stored, expired ones included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
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
	h, sh := s.locate(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := sh.findLocked(h, req.Key)
	if held(old, req.Now, req.SkewMargin) {
		return dedup.Claim{Existing: *clone(old)}, nil
	}
	_, c := sh.claimLocked(h, old, req.Key, req.Owner, req.PayloadHash, dedup.StatusPending, req.Now, req.LeaseUntil)
	return c, nil
}

// held reports whether old still blocks a claim at now: it is live, or a
// lease expired by no more than the claimer's skew margin. The margin
// protects leases only: a retry delay or a retention ends on time.
func held(old *dedup.Record, now time.Time, margin time.Duration) bool {
	if old == nil {
		return false
	}
	if old.Status != dedup.StatusPending {
		margin = 0
	}
	return old.Live(now.Add(-max(margin, 0)))
}

// fenced returns the record the lease still fences, or ErrLeaseLost.
func fenced(sh *shard, h uint64, l dedup.Lease) (*dedup.Record, error) {
	r := sh.findLocked(h, l.Key)
	if r == nil || r.Status != dedup.StatusPending || r.Owner != l.Owner || r.Version != l.Version {
		return nil, fmt.Errorf("%w: key_hash %s version %d", dedup.ErrLeaseLost, dedup.KeyHash(l.Key), l.Version)
	}
	return r, nil
}

// asWrites takes the Store's own writes out of ws: Write and *Write.
func asWrites(ws []dedup.Write) ([]Write, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	out := make([]Write, len(ws))
	for i, w := range ws {
		switch w := w.(type) {
		case Write:
			out[i] = w
		case *Write:
			if w == nil {
				return nil, &dedup.NilWriteError{Index: i, Type: fmt.Sprintf("%T", w)}
			}
			out[i] = *w
		case nil:
			return nil, &dedup.NilWriteError{Index: i, Type: "<nil>"}
		default:
			return nil, fmt.Errorf("%w: %T (the in-memory store takes memstore.Write)", dedup.ErrUnsupportedWrite, w)
		}
	}
	return out, nil
}

// lockCommit takes the locks a commit on key needs: the key's shard, and
// first the lock serializing commits that carry writes. The record side
// is decided and applied inline by the caller (no closures: they would
// cost allocations on every Complete).
func (s *Store) lockCommit(key string, writes []Write) (uint64, *shard) {
	if len(writes) > 0 {
		s.writeMu.Lock()
	}
	h, sh := s.locate(key)
	sh.mu.Lock()
	return h, sh
}

func (s *Store) unlockCommit(sh *shard, writes []Write) {
	sh.mu.Unlock()
	if len(writes) > 0 {
		s.writeMu.Unlock()
	}
}

// applyWrites runs every Check and, only if all pass, every Apply: the
// business side of an all-or-nothing commit.
func applyWrites(writes []Write) error {
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
	return nil
}

// Complete implements dedup.Store.
func (s *Store) Complete(_ context.Context, req dedup.CompleteRequest) error {
	if err := dedup.CheckResponse(req.Response, s.maxResponse); err != nil {
		return err
	}
	writes, err := asWrites(req.Writes)
	if err != nil {
		return err
	}
	h, sh := s.lockCommit(req.Lease.Key, writes)
	defer s.unlockCommit(sh, writes)
	r, err := fenced(sh, h, req.Lease)
	if err != nil {
		return err
	}
	if err := applyWrites(writes); err != nil {
		return err
	}
	s.outbox.add(req.Lease.Key, req.Outbox, req.Now)
	r.Status, r.Version = dedup.StatusCompleted, r.Version+1
	r.Response, r.ExpiresAt, r.LastError = sh.keepLocked(req.Response), req.ExpiresAt, ""
	return nil
}

// Capabilities implements dedup.Store: ClaimComplete works, the business
// writes are Write and *Write, outgoing messages commit with COMPLETED
// (the relay's view, Outbox, is handed over), and so do batch mode's
// offset rows (the batch view, Offsets); the Store is its own Inspector.
func (s *Store) Capabilities() dedup.Capabilities {
	return dedup.Capabilities{ClaimComplete: true, Writes: Kind, Outbox: s.Outbox(), Offsets: s.Offsets(), Inspector: s, Resetter: s, Forgetter: s}
}

// Attach implements dedup.Store. The in-memory store neither logs nor
// retries, so it needs nothing from a Guard.
func (s *Store) Attach(dedup.Runtime) {}

// ClaimComplete implements dedup.Store.
func (s *Store) ClaimComplete(_ context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	if req.Key == "" {
		return dedup.Claim{}, dedup.ErrEmptyKey
	}
	if err := dedup.CheckResponse(req.Response, s.maxResponse); err != nil {
		return dedup.Claim{}, err
	}
	writes, err := asWrites(req.Writes)
	if err != nil {
		return dedup.Claim{}, err
	}
	h, sh := s.lockCommit(req.Key, writes)
	defer s.unlockCommit(sh, writes)
	old := sh.findLocked(h, req.Key)
	if held(old, req.Now, req.SkewMargin) {
		return dedup.Claim{Existing: *clone(old)}, nil
	}
	// The writes decide before the record changes: a cancelled commit
	// leaves it as it was.
	if err := applyWrites(writes); err != nil {
		return dedup.Claim{}, err
	}
	s.outbox.add(req.Key, req.Outbox, req.Now)
	rec, c := sh.claimLocked(h, old, req.Key, req.Owner, req.PayloadHash, dedup.StatusCompleted, req.Now, req.ExpiresAt)
	rec.Response = sh.keepLocked(req.Response)
	return c, nil
}

// Fail implements dedup.Store.
func (s *Store) Fail(_ context.Context, req dedup.FailRequest) error {
	reason := dedup.StorableReason(req.Reason)
	return s.withLease(req.Lease, func(r *dedup.Record) {
		r.Status, r.Version, r.LastError, r.ExpiresAt = dedup.StatusFailed, r.Version+1, reason, req.RetryAt
		if req.DeadLetter {
			r.Status = dedup.StatusDeadLetter
		}
		switch {
		case req.ResetAttempts:
			r.Attempts, r.Takeovers = 0, 0
		case !req.RefundAttempt:
			r.Attempts++
		}
	})
}

// Extend implements dedup.Store.
func (s *Store) Extend(_ context.Context, req dedup.ExtendRequest) error {
	return s.withLease(req.Lease, func(r *dedup.Record) {
		if req.LeaseUntil.After(r.ExpiresAt) {
			r.ExpiresAt = req.LeaseUntil
		}
	})
}

// withLease runs f on the record l still holds, under its shard's lock, or
// returns dedup.ErrLeaseLost. Complete locks more (its writes) and does not
// use it.
func (s *Store) withLease(l dedup.Lease, f func(r *dedup.Record)) error {
	h, sh := s.locate(l.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r, err := fenced(sh, h, l)
	if err != nil {
		return err
	}
	f(r)
	return nil
}

// Check implements dedup.Store: an in-process store always works.
func (s *Store) Check(context.Context) error { return nil }

// Get implements dedup.Store.
func (s *Store) Get(_ context.Context, key string) (dedup.Record, error) {
	h, sh := s.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.findLocked(h, key)
	if r == nil {
		return dedup.Record{}, fmt.Errorf("%w: key_hash %s", dedup.ErrNotFound, dedup.KeyHash(key))
	}
	return *clone(r), nil
}

// Sweep deletes the records expired at now, as DynamoDB's TTL would, and
// returns how many; a long-running embedded worker calls it to bound
// memory. Claims never depend on it: an expired record counts as absent.
// It deletes too the outbox entries dispatched or dead past their
// retention (not counted).
func (s *Store) Sweep(now time.Time) int {
	s.outbox.sweep(now)
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for h, head := range sh.records {
			// Keep the chain's live entries, in order.
			var kept, tail *entry
			for e := head; e != nil; e = e.next {
				if !e.rec.Live(now) {
					n++
					sh.n--
					continue
				}
				if kept == nil {
					kept = e
				} else {
					tail.next = e
				}
				tail = e
			}
			switch {
			case kept == nil:
				delete(sh.records, h)
			default:
				tail.next = nil
				if kept != head {
					sh.records[h] = kept
				}
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// succeed writes into rec the record a winning claim of key writes, and
// returns the Claim: one version on from old (nil for a fresh key), the
// failed runs and takeovers old counted kept, except past a COMPLETED
// record's retention (a new message), and one takeover more over an
// abandoned lease. Claim and ClaimComplete differ only in the status and
// expiry written.
func succeed(rec, old *dedup.Record, key, owner, payloadHash string, status dedup.Status, now, expires time.Time) (*dedup.Record, dedup.Claim) {
	*rec = dedup.Record{Key: key, Status: status, Version: 1, Owner: owner,
		PayloadHash: payloadHash, CreatedAt: now, ExpiresAt: expires}
	c := dedup.Claim{Acquired: true}
	if old != nil {
		rec.Version = old.Version + 1
		if old.Status != dedup.StatusCompleted {
			rec.Attempts, rec.Takeovers = old.Attempts, old.Takeovers
		}
		if old.Status == dedup.StatusPending {
			rec.Takeovers++ // its holder abandoned the lease
		}
		c.Previous = old
	}
	c.Lease = dedup.Lease{Key: key, Owner: owner, Version: rec.Version}
	c.Attempt, c.Takeovers = rec.Attempts+1, rec.Takeovers
	return rec, c
}

var _ dedup.Resetter = (*Store)(nil)

// Reset implements dedup.Resetter.
func (s *Store) Reset(_ context.Context, req dedup.ResetRequest) error {
	h, sh := s.locate(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.findLocked(h, req.Key)
	if r == nil || r.Version != req.Version || !dedup.Resettable(*r, req.Now) {
		return fmt.Errorf("memstore: reset: %w: key_hash %s version %d", dedup.ErrRecordChanged, dedup.KeyHash(req.Key), req.Version)
	}
	r.Status, r.Version, r.LastError, r.ExpiresAt = dedup.StatusFailed, r.Version+1, dedup.StorableReason(req.Reason), req.Now
	r.Attempts, r.Takeovers = 0, 0
	return nil
}
