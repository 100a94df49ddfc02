package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/retry"
)

// Options tune the suite for slower stores.
type Options struct {
	// RaceGoroutines and RaceRounds size the one-key claim race
	// (default 64 × 200).
	RaceGoroutines, RaceRounds int
	// Throttled, when set, returns a Store over the same records whose
	// next calls meet a throttle before they go through (the DynamoDB
	// Store's test puts a fault-injecting proxy in front of its server).
	// A Store that never throttles (the in-memory one) leaves it nil and
	// the case is skipped.
	Throttled func(t *testing.T) dedup.Store
	// Corrupt makes the record of l.Key, which the suite has just claimed
	// (a live PENDING record of l.Owner, an owner no other record has), one
	// the Store never writes, in the way c, by writing to the Store's
	// backing table directly. st is the Store the suite's newStore made.
	// A Store that holds only what its own calls wrote (the in-memory one)
	// leaves it nil and the case is skipped.
	Corrupt func(t *testing.T, st dedup.Store, l dedup.Lease, c Corruption)
	// MaxResponseSize is the response limit of the Stores newStore makes
	// (default dedup.DefaultMaxResponseSize).
	MaxResponseSize int
	// NilWrites are nil values of the Store's own write types (a nil
	// pointer, a nil func), each of which Complete must refuse with a
	// *dedup.NilWriteError; a nil interface is always tried.
	NilWrites []dedup.Write
	// Inserts, for a Store whose Capabilities give Offsets, makes the
	// Store's own business writes for the batch cases; the cases that
	// need writes are skipped without it.
	Inserts func(t *testing.T, st dedup.Store) Inserts
	// BatchMax is the most items one batch commit takes (the offset row,
	// the writes and the keys; DynamoDB: 100); 0: no bound, and the case
	// of a commit over it is skipped.
	BatchMax int
	// RejectingWrite returns a write of the Store's own type whose own
	// condition fails, so that Complete refuses the commit with a
	// *dedup.BusinessConditionError (the outbox cases check that such a
	// commit sends nothing). Nil: that part is skipped.
	RejectingWrite func() dedup.Write
	// MissingOutbox, for a Store whose Capabilities give an Outbox,
	// returns a Store whose outbox table does not exist, and that table's
	// name: the outbox's Check fails, and a relay over it stops at start,
	// with an error naming the table. A
	// Store with no table to miss (the in-memory one) leaves it nil and
	// the case is skipped.
	MissingOutbox func(t *testing.T) (dedup.Store, string)
	// Peer returns another worker's Store over the same records and
	// outbox as st (made as st was, over the same tables), for the case
	// of two workers committing to one lane with different clocks. Nil:
	// st itself.
	Peer func(t *testing.T, st dedup.Store) dedup.Store
}

// Run runs the suite. newStore is called once per subtest.
func Run(t *testing.T, newStore func(t *testing.T) dedup.Store, opts ...Options) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.RaceGoroutines <= 0 {
		o.RaceGoroutines = 64
	}
	if o.RaceRounds <= 0 {
		o.RaceRounds = 200
	}
	s := &suite{opts: o}
	tests := []struct {
		name string
		fn   func(t *testing.T, st dedup.Store)
	}{
		{"ClaimFresh", s.claimFresh},
		{"ClaimRaceHasOneWinner", s.claimRace},
		{"LoserLearnsLiveRecord", s.loserLearns},
		{"CompletedReturnsCachedResponse", s.completedCached},
		{"TakeoverAfterLeaseExpiryFencesOldOwner", s.takeover},
		{"FailedReclaimableAfterDelay", s.failedReclaim},
		{"ResetAttemptsOnFail", s.resetAttempts},
		{"RefundAttemptOnFail", s.refundAttempt},
		{"AttemptsCountFailedRuns", s.attemptsCountFailures},
		{"DeadLetterKeptUntilExpiry", s.deadLetterKept},
		{"SkewMarginDelaysClaim", s.skewMargin},
		{"ExpiredButPresentIsAbsent", s.expiredPresent},
		{"PayloadHashKeptForKeyReuse", s.payloadHash},
		{"ExtendKeepsLease", s.extend},
		{"ExtendNeverShortens", s.extendNeverShortens},
		{"CompleteOnlyOnce", s.completeOnce},
		{"UnsupportedWriteCommitsNothing", s.unsupportedWrite},
		{"GetAbsent", s.getAbsent},
		{"ClaimComplete", s.claimComplete},
		{"ThrottleReachesObserver", s.throttleObserved},
		{"WrapperKeepsCapabilities", s.wrapperKeepsCapabilities},
		{"WrapperHandsOverViews", s.wrapperHandsOverViews},
		{"CorruptRecordRefused", s.corruptRecordRefused},
		{"FailReasonAlwaysLands", s.failReasons},
		{"NilWriteRefused", s.nilWrites},
		{"ResponseOverLimitRefused", s.responseLimit},
		{"TakeoversCountAbandonedLeases", s.takeovers},
		{"DeclaredWritesAreCommitted", s.declaredWrites},
		{"Outbox", s.outboxCases},
		{"Inspector", s.inspector},
		{"Forget", s.forget},
		{"Reset", s.reset},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
	s.runBatch(t, newStore)
	// The state machine once more through a pass-through wrapper, with a
	// smaller race: what a wrapper may lose is forwarding, not speed.
	w := &suite{opts: Options{RaceGoroutines: 8, RaceRounds: 20, MaxResponseSize: o.MaxResponseSize, NilWrites: o.NilWrites, RejectingWrite: o.RejectingWrite}}
	wrapped := map[string]func(*testing.T, dedup.Store){
		"ClaimRaceHasOneWinner": w.claimRace, "ThrottleReachesObserver": w.throttleObserved,
	}
	t.Run("Wrapped", func(t *testing.T) {
		for _, tc := range tests {
			fn := tc.fn
			if f, ok := wrapped[tc.name]; ok {
				fn = f
			}
			t.Run(tc.name, func(t *testing.T) { fn(t, Wrapped{newStore(t)}) })
		}
	})
}

type suite struct{ opts Options }

var t0 = time.Now().Add(time.Hour).Truncate(time.Second)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func key(t *testing.T) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "storetest#" + t.Name() + "-" + hex.EncodeToString(b)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func claim(t *testing.T, st dedup.Store, k, owner, hash string, now, until int) dedup.Claim {
	t.Helper()
	c, err := st.Claim(ctx(t), dedup.ClaimRequest{Key: k, PayloadHash: hash, Owner: owner, Now: at(now), LeaseUntil: at(until)})
	if err != nil {
		t.Fatalf("claim %s by %s at +%ds: %v", k, owner, now, err)
	}
	return c
}

func mustAcquire(t *testing.T, c dedup.Claim, attempt int) dedup.Lease {
	t.Helper()
	if !c.Acquired {
		t.Fatalf("claim not acquired; existing %+v", c.Existing)
	}
	if c.Attempt != attempt {
		t.Fatalf("claim Attempt %d, want %d", c.Attempt, attempt)
	}
	return c.Lease
}

func mustLose(t *testing.T, c dedup.Claim, status dedup.Status) dedup.Record {
	t.Helper()
	if c.Acquired {
		t.Fatalf("claim acquired a live key (lease %+v)", c.Lease)
	}
	if c.Existing.Status != status {
		t.Fatalf("existing record %s, want %s (%+v)", c.Existing.Status, status, c.Existing)
	}
	return c.Existing
}

func complete(t *testing.T, st dedup.Store, l dedup.Lease, resp string, now, until int) error {
	t.Helper()
	return st.Complete(ctx(t), dedup.CompleteRequest{Lease: l, Response: []byte(resp), Now: at(now), ExpiresAt: at(until)})
}

func get(t *testing.T, st dedup.Store, k string) dedup.Record {
	t.Helper()
	r, err := st.Get(ctx(t), k)
	if err != nil {
		t.Fatalf("get %s: %v", k, err)
	}
	return r
}

func (s *suite) claimFresh(t *testing.T, st dedup.Store) {
	k := key(t)
	c := claim(t, st, k, "a", "h1", 0, 30)
	l := mustAcquire(t, c, 1)
	if l.Key != k || l.Owner != "a" || l.Version <= 0 {
		t.Fatalf("lease %+v", l)
	}
	if c.Previous != nil {
		t.Fatalf("fresh claim reports a previous record %+v", c.Previous)
	}
	r := get(t, st, k)
	if r.Status != dedup.StatusPending || r.Owner != "a" || r.PayloadHash != "h1" || r.Version != l.Version || r.Attempts != 0 {
		t.Fatalf("record after claim %+v (a claim counts no failed run)", r)
	}
	if !r.ExpiresAt.Equal(at(30)) {
		t.Fatalf("PENDING expires at %v, want the lease end %v", r.ExpiresAt, at(30))
	}
}

func (s *suite) claimRace(t *testing.T, st dedup.Store) {
	n, rounds := s.opts.RaceGoroutines, s.opts.RaceRounds
	base := key(t)
	for round := range rounds {
		k := fmt.Sprintf("%s-%d", base, round)
		var (
			wins   atomic.Int32
			winner atomic.Value
			wg     sync.WaitGroup
			start  = make(chan struct{})
			errs   = make(chan error, n)
			owners = make([]string, n)
			seen   = make([]dedup.Claim, n)
		)
		for g := range n {
			owners[g] = fmt.Sprintf("w%d", g)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				c, err := st.Claim(context.Background(), dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: owners[g], Now: at(0), LeaseUntil: at(60)})
				if err != nil {
					errs <- err
					return
				}
				seen[g] = c
				if c.Acquired {
					wins.Add(1)
					winner.Store(owners[g])
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: claim error: %v", round, err)
		}
		if w := wins.Load(); w != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1", round, w)
		}
		for g, c := range seen {
			if !c.Acquired && (c.Existing.Owner != winner.Load() || c.Existing.Status != dedup.StatusPending) {
				t.Fatalf("round %d: loser %d saw %+v, winner %v", round, g, c.Existing, winner.Load())
			}
		}
	}
}

func (s *suite) loserLearns(t *testing.T, st dedup.Store) {
	k := key(t)
	mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	r := mustLose(t, claim(t, st, k, "b", "h1", 1, 31), dedup.StatusPending)
	if r.Owner != "a" || r.PayloadHash != "h1" || !r.ExpiresAt.Equal(at(30)) {
		t.Fatalf("loser saw %+v", r)
	}
}

func (s *suite) completedCached(t *testing.T, st dedup.Store) {
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	resp := "ok\x00\xff binary"
	if err := complete(t, st, l, resp, 1, 3600); err != nil {
		t.Fatalf("complete: %v", err)
	}
	r := mustLose(t, claim(t, st, k, "b", "h1", 2, 32), dedup.StatusCompleted)
	if string(r.Response) != resp || !r.ExpiresAt.Equal(at(3600)) {
		t.Fatalf("duplicate saw response %q expiry %v", r.Response, r.ExpiresAt)
	}
	if g := get(t, st, k); g.Status != dedup.StatusCompleted || string(g.Response) != resp || g.Version <= l.Version {
		t.Fatalf("record after complete %+v (lease version %d)", g, l.Version)
	}
}

func (s *suite) takeover(t *testing.T, st dedup.Store) {
	k := key(t)
	a := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 10), 1)
	mustLose(t, claim(t, st, k, "b", "h1", 10, 20), dedup.StatusPending)
	c := claim(t, st, k, "b", "h1", 11, 41)
	b := mustAcquire(t, c, 1) // an abandoned lease is no failed run
	if b.Version <= a.Version {
		t.Fatalf("takeover version %d not above %d", b.Version, a.Version)
	}
	if c.Previous == nil || c.Previous.Owner != "a" || c.Previous.Status != dedup.StatusPending {
		t.Fatalf("takeover saw previous %+v", c.Previous)
	}
	if err := complete(t, st, a, "from a", 12, 3600); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("fenced Complete: %v, want ErrLeaseLost", err)
	}
	if err := st.Fail(ctx(t), dedup.FailRequest{Lease: a, Reason: "x", Now: at(12), RetryAt: at(15)}); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("fenced Fail: %v, want ErrLeaseLost", err)
	}
	if err := st.Extend(ctx(t), dedup.ExtendRequest{Lease: a, Now: at(12), LeaseUntil: at(50)}); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("fenced Extend: %v, want ErrLeaseLost", err)
	}
	if err := complete(t, st, b, "from b", 13, 3600); err != nil {
		t.Fatalf("new owner's Complete: %v", err)
	}
	if r := get(t, st, k); r.Status != dedup.StatusCompleted || string(r.Response) != "from b" || r.Owner != "b" {
		t.Fatalf("record %+v, want COMPLETED by b", r)
	}
}

func (s *suite) failedReclaim(t *testing.T, st dedup.Store) {
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: "boom", Now: at(1), RetryAt: at(5)}); err != nil {
		t.Fatalf("fail: %v", err)
	}
	r := mustLose(t, claim(t, st, k, "b", "h1", 2, 32), dedup.StatusFailed)
	if r.LastError != "boom" || !r.ExpiresAt.Equal(at(5)) || r.Attempts != 1 {
		t.Fatalf("FAILED record %+v", r)
	}
	c := claim(t, st, k, "b", "h1", 6, 36)
	mustAcquire(t, c, 2)
	if c.Previous == nil || c.Previous.Status != dedup.StatusFailed {
		t.Fatalf("re-claim saw previous %+v", c.Previous)
	}
}

// Attempts count failed handler runs only: a takeover of an abandoned
// lease keeps the count, an expired COMPLETED record taken over is a new
// message.
func (s *suite) attemptsCountFailures(t *testing.T, st dedup.Store) {
	k := key(t)
	mustAcquire(t, claim(t, st, k, "a", "h1", 0, 10), 1)
	// a dies holding the lease; b takes it over and dies too; then c.
	mustAcquire(t, claim(t, st, k, "b", "h1", 11, 20), 1)
	l := mustAcquire(t, claim(t, st, k, "c", "h1", 21, 30), 1)
	if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: "x", Now: at(22), RetryAt: at(23)}); err != nil {
		t.Fatal(err)
	}
	if r := get(t, st, k); r.Attempts != 1 {
		t.Fatalf("record after one failed run %+v, want 1 attempt", r)
	}
	mustAcquire(t, claim(t, st, k, "d", "h1", 24, 34), 2)
	mustAcquire(t, claim(t, st, k, "e", "h1", 35, 45), 2) // d abandoned it
	l = mustAcquire(t, claim(t, st, k, "f", "h1", 46, 56), 2)
	if err := complete(t, st, l, "r", 47, 50); err != nil {
		t.Fatal(err)
	}
	// Past the COMPLETED record's retention, before anything removed it.
	c := claim(t, st, k, "g", "h1", 51, 60)
	mustAcquire(t, c, 1)
	if c.Previous == nil || c.Previous.Status != dedup.StatusCompleted {
		t.Fatalf("re-claim past retention saw previous %+v", c.Previous)
	}
	if r := get(t, st, k); r.Attempts != 0 {
		t.Fatalf("record of a new message %+v, want 0 attempts", r)
	}
}

func (s *suite) resetAttempts(t *testing.T, st dedup.Store) {
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: "x", Now: at(1), RetryAt: at(2)}); err != nil {
		t.Fatal(err)
	}
	l = mustAcquire(t, claim(t, st, k, "a", "h1", 3, 30), 2)
	if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: "dead", Now: at(4), RetryAt: at(5), ResetAttempts: true}); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, claim(t, st, k, "a", "h1", 6, 30), 1)
}

// A Fail that keeps a dead letter leaves a DEAD_LETTER record with its
// reason, which no claim takes until it expires.
func (s *suite) deadLetterKept(t *testing.T, st dedup.Store) {
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: "copy too large", Now: at(1), RetryAt: at(100), DeadLetter: true, ResetAttempts: true}); err != nil {
		t.Fatal(err)
	}
	if r := get(t, st, k); r.Status != dedup.StatusDeadLetter || r.LastError != "copy too large" || r.Version != l.Version+1 {
		t.Fatalf("record %+v, want DEAD_LETTER with its reason", r)
	}
	if c := claim(t, st, k, "a", "h1", 50, 80); c.Acquired || c.Existing.Status != dedup.StatusDeadLetter {
		t.Fatalf("claim of a kept dead letter: %+v, want the DEAD_LETTER record, not acquired", c)
	}
	mustAcquire(t, claim(t, st, k, "a", "h1", 102, 130), 1)
}

// A Fail that refunds its attempt (the store failed, not the handler)
// leaves the count where it was before the claim.
func (s *suite) refundAttempt(t *testing.T, st dedup.Store) {
	k := key(t)
	fail := func(l dedup.Lease, now int, refund, reset bool) {
		t.Helper()
		err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: "x", Now: at(now), RetryAt: at(now + 1), RefundAttempt: refund, ResetAttempts: reset})
		if err != nil {
			t.Fatalf("fail: %v", err)
		}
	}
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	fail(l, 1, false, false)
	l = mustAcquire(t, claim(t, st, k, "a", "h1", 3, 30), 2)
	fail(l, 4, true, false)
	if r := get(t, st, k); r.Attempts != 1 || r.Status != dedup.StatusFailed {
		t.Fatalf("record after a refunded Fail %+v, want 1 attempt", r)
	}
	l = mustAcquire(t, claim(t, st, k, "a", "h1", 6, 30), 2)
	fail(l, 7, true, false)
	l = mustAcquire(t, claim(t, st, k, "a", "h1", 9, 30), 2)
	fail(l, 10, false, true)
	l = mustAcquire(t, claim(t, st, k, "a", "h1", 12, 30), 1)
	fail(l, 13, true, false)
	if r := get(t, st, k); r.Attempts != 0 {
		t.Fatalf("record after refunding the only attempt %+v, want 0 attempts", r)
	}
	mustAcquire(t, claim(t, st, k, "a", "h1", 15, 30), 1)
}

// A lease is claimable only once Now is past its ExpiresAt by more than
// the claimer's SkewMargin, for Claim and ClaimComplete alike; a FAILED
// record's retry delay ends on time.
func (s *suite) skewMargin(t *testing.T, st dedup.Store) {
	k := key(t)
	mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	const margin = 5 * time.Second
	req := func(now int) dedup.ClaimRequest {
		return dedup.ClaimRequest{Key: k, PayloadHash: "h1", Owner: "b", Now: at(now), LeaseUntil: at(now + 30), SkewMargin: margin}
	}
	for _, now := range []int{31, 35} {
		c, err := st.Claim(ctx(t), req(now))
		if err != nil {
			t.Fatal(err)
		}
		mustLose(t, c, dedup.StatusPending)
	}
	c, err := st.Claim(ctx(t), req(36))
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, c, 1)

	if !st.Capabilities().ClaimComplete {
		return
	}
	cc := st
	k2 := key(t) + "-cc"
	mustAcquire(t, claim(t, st, k2, "a", "h1", 0, 30), 1)
	ccReq := dedup.ClaimCompleteRequest{Key: k2, PayloadHash: "h1", Owner: "b", Now: at(35), ExpiresAt: at(3600), SkewMargin: margin}
	if c, err = cc.ClaimComplete(ctx(t), ccReq); err != nil {
		t.Fatal(err)
	}
	mustLose(t, c, dedup.StatusPending)
	ccReq.Now = at(36)
	if c, err = cc.ClaimComplete(ctx(t), ccReq); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, c, 1)

	k3 := key(t) + "-failed"
	l := mustAcquire(t, claim(t, st, k3, "a", "h1", 0, 30), 1)
	if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: "x", Now: at(1), RetryAt: at(5)}); err != nil {
		t.Fatal(err)
	}
	if c, err = st.Claim(ctx(t), dedup.ClaimRequest{Key: k3, PayloadHash: "h1", Owner: "b", Now: at(6), LeaseUntil: at(36), SkewMargin: margin}); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, c, 2)
}

func (s *suite) expiredPresent(t *testing.T, st dedup.Store) {
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	if err := complete(t, st, l, "old", 1, 60); err != nil {
		t.Fatal(err)
	}
	mustLose(t, claim(t, st, k, "b", "h1", 60, 90), dedup.StatusCompleted)
	c := claim(t, st, k, "b", "h1", 61, 91)
	mustAcquire(t, c, 1)
	if c.Previous == nil || c.Previous.Status != dedup.StatusCompleted || string(c.Previous.Response) != "old" {
		t.Fatalf("claim over expired COMPLETED saw previous %+v", c.Previous)
	}
	if r := get(t, st, k); r.Status != dedup.StatusPending || len(r.Response) != 0 || r.Owner != "b" {
		t.Fatalf("record after re-claim %+v", r)
	}
}

func (s *suite) payloadHash(t *testing.T, st dedup.Store) {
	k := key(t)
	mustAcquire(t, claim(t, st, k, "a", "hash-1", 0, 30), 1)
	r := mustLose(t, claim(t, st, k, "b", "hash-2", 1, 31), dedup.StatusPending)
	if r.PayloadHash != "hash-1" {
		t.Fatalf("existing payload hash %q, want hash-1", r.PayloadHash)
	}
	if g := get(t, st, k); g.PayloadHash != "hash-1" {
		t.Fatalf("a losing claim changed the payload hash to %q", g.PayloadHash)
	}
}

func (s *suite) extend(t *testing.T, st dedup.Store) {
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 10), 1)
	if err := st.Extend(ctx(t), dedup.ExtendRequest{Lease: l, Now: at(5), LeaseUntil: at(30)}); err != nil {
		t.Fatalf("extend: %v", err)
	}
	mustLose(t, claim(t, st, k, "b", "h1", 15, 45), dedup.StatusPending)
	if err := complete(t, st, l, "done", 20, 3600); err != nil {
		t.Fatalf("complete after extend: %v", err)
	}
	k2 := key(t) + "-2"
	l2 := mustAcquire(t, claim(t, st, k2, "a", "h1", 0, 10), 1)
	if err := st.Extend(ctx(t), dedup.ExtendRequest{Lease: l2, Now: at(5), LeaseUntil: at(30)}); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, claim(t, st, k2, "b", "h1", 31, 61), 1)
}

// A holder whose clock stepped back asks for an earlier expiry: the lease
// stays as long as it was, or a claimer in between would take a live key.
func (s *suite) extendNeverShortens(t *testing.T, st dedup.Store) {
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	if err := st.Extend(ctx(t), dedup.ExtendRequest{Lease: l, Now: at(5), LeaseUntil: at(10)}); err != nil {
		t.Fatalf("extend to an earlier expiry: %v, want nil (the lease is already longer)", err)
	}
	if r := get(t, st, k); !r.ExpiresAt.Equal(at(30)) || r.Version != l.Version || r.Owner != "a" {
		t.Fatalf("record after a backward extend %+v, want ExpiresAt %v kept", r, at(30))
	}
	mustLose(t, claim(t, st, k, "b", "h1", 20, 50), dedup.StatusPending)
	if err := complete(t, st, l, "done", 21, 3600); err != nil {
		t.Fatalf("lease not held after a backward extend: %v", err)
	}
}

func (s *suite) completeOnce(t *testing.T, st dedup.Store) {
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	if err := complete(t, st, l, "first", 1, 3600); err != nil {
		t.Fatal(err)
	}
	if err := complete(t, st, l, "second", 2, 3600); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("second Complete on one lease: %v, want ErrLeaseLost", err)
	}
	if r := get(t, st, k); string(r.Response) != "first" {
		t.Fatalf("response %q after a second Complete", r.Response)
	}
}

func (s *suite) unsupportedWrite(t *testing.T, st dedup.Store) {
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	err := st.Complete(ctx(t), dedup.CompleteRequest{Lease: l, Response: []byte("x"), Now: at(1), ExpiresAt: at(3600),
		Writes: []dedup.Write{nonsenseWrite{1}}})
	if !errors.Is(err, dedup.ErrUnsupportedWrite) {
		t.Fatalf("Complete with an unknown write: %v, want ErrUnsupportedWrite", err)
	}
	if r := get(t, st, k); r.Status != dedup.StatusPending {
		t.Fatalf("a rejected Complete changed the record: %+v", r)
	}
	if err := complete(t, st, l, "x", 2, 3600); err != nil {
		t.Fatalf("lease not held after a rejected Complete: %v", err)
	}
}

func (s *suite) getAbsent(t *testing.T, st dedup.Store) {
	if _, err := st.Get(ctx(t), key(t)); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("Get of an absent key: %v, want ErrNotFound", err)
	}
}

func (s *suite) claimComplete(t *testing.T, st dedup.Store) {
	if !st.Capabilities().ClaimComplete {
		if _, err := st.ClaimComplete(ctx(t), dedup.ClaimCompleteRequest{Key: key(t), Owner: "a", Now: at(0), ExpiresAt: at(3600)}); !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("ClaimComplete of a Store without it: %v, want errors.ErrUnsupported", err)
		}
		return
	}
	cc := st
	k := key(t)
	req := dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h1", Owner: "a", Response: []byte("r"), Now: at(0), ExpiresAt: at(3600)}
	c, err := cc.ClaimComplete(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, c, 1)
	if r := get(t, st, k); r.Status != dedup.StatusCompleted || string(r.Response) != "r" {
		t.Fatalf("record after ClaimComplete %+v", r)
	}
	req.Owner, req.Response, req.Now = "b", []byte("other"), at(1)
	c, err = cc.ClaimComplete(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if r := mustLose(t, c, dedup.StatusCompleted); string(r.Response) != "r" {
		t.Fatalf("duplicate ClaimComplete saw %q", r.Response)
	}
	k2 := key(t) + "-p"
	mustAcquire(t, claim(t, st, k2, "a", "h1", 0, 30), 1)
	c, err = cc.ClaimComplete(ctx(t), dedup.ClaimCompleteRequest{Key: k2, PayloadHash: "h1", Owner: "b", Now: at(1), ExpiresAt: at(3600)})
	if err != nil {
		t.Fatal(err)
	}
	mustLose(t, c, dedup.StatusPending)
	c, err = cc.ClaimComplete(ctx(t), dedup.ClaimCompleteRequest{Key: k2, PayloadHash: "h1", Owner: "b", Now: at(31), ExpiresAt: at(3600)})
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, c, 1)
}

// A throttle is part of the contract: a Store that retries one tells the
// observers it was handed (Attach; the consumer adapts its concurrency to
// them), every one of them when several Guards share the Store, and the
// retried call still succeeds.
func (s *suite) throttleObserved(t *testing.T, _ dedup.Store) {
	if s.opts.Throttled == nil {
		t.Skip("the store has no throttle to meet")
	}
	st := s.opts.Throttled(t)
	var mu sync.Mutex
	seen := make([][]retry.Class, 2)
	for i := range seen {
		st.Attach(dedup.Runtime{Observe: func(class retry.Class, _ error) {
			mu.Lock()
			seen[i] = append(seen[i], class)
			mu.Unlock()
		}})
	}
	k := key(t)
	cl, err := st.Claim(ctx(t), dedup.ClaimRequest{Key: k, PayloadHash: "h1", Owner: "a", Now: at(0), LeaseUntil: at(30)})
	if err != nil {
		t.Fatalf("throttled claim: %v", err)
	}
	mustAcquire(t, cl, 1)
	mu.Lock()
	defer mu.Unlock()
	for i, classes := range seen {
		if !slices.Contains(classes, retry.Throttled) {
			t.Fatalf("observer %d of 2 saw %v, want retry.Throttled", i+1, classes)
		}
	}
}
