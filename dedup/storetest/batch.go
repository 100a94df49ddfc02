package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/onceq/onceq/dedup"
)

// Inserts are business writes of a Store's own type, for the batch
// cases: each records an id, and its own condition fails when the id is
// already recorded.
type Inserts struct {
	// Insert returns a write that records id, or whose condition fails
	// (a *dedup.BusinessConditionError from Commit) when id is recorded.
	Insert func(id string) dedup.Write
	// Inserted reports whether id is recorded.
	Inserted func(t *testing.T, id string) bool
}

// runBatch runs the batch cases over the Stores newStore makes, when
// their Capabilities give a batch view (Capabilities.Offsets): the offset
// rows of batch mode (package batch), fenced by
// token, committed with the batch's Writes and Keys all or nothing.
func (s *suite) runBatch(t *testing.T, newStore func(t *testing.T) dedup.Store) {
	cases := []struct {
		name string
		fn   func(t *testing.T, st dedup.Store, bs dedup.Offsets)
	}{
		{"AcquireCreatesRowAndRaisesToken", s.batchAcquire},
		{"CommitMovesNextWithWrites", s.batchCommit},
		{"ZombieCommitFenced", s.batchZombie},
		{"FromMismatchRefused", s.batchMismatch},
		{"BusinessConditionCommitsNothing", s.batchCondition},
		{"KeysClaimedCompleted", s.batchKeys},
		{"DuplicateKeysCommitNothing", s.batchDuplicateKeys},
		{"OverBoundCommitsNothing", s.batchTooLarge},
		{"InvalidCommitRefused", s.batchInvalid},
		{"ConcurrentAcquireOneTokenWins", s.batchRace},
	}
	t.Run("Batch", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				st := newStore(t)
				bs := st.Capabilities().Offsets
				if bs == nil {
					t.Skip("the Store's Capabilities give no Offsets: it has no batch mode")
				}
				tc.fn(t, st, bs)
			})
		}
	})
}

// partition is a partition no other test uses.
func partition(t *testing.T) dedup.Partition {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return dedup.Partition{Group: "storetest-" + hex.EncodeToString(b), Topic: "orders.v1", Partition: 3}
}

// inserts returns the Store's Inserts, skipping a case that needs them
// when the Store's test gave none.
func (s *suite) inserts(t *testing.T, st dedup.Store) Inserts {
	t.Helper()
	if s.opts.Inserts == nil {
		t.Skip("no Options.Inserts for the Store's business writes")
	}
	return s.opts.Inserts(t, st)
}

func acquire(t *testing.T, bs dedup.Offsets, p dedup.Partition, member string) dedup.OffsetLease {
	t.Helper()
	l, err := bs.Acquire(ctx(t), p, member)
	if err != nil {
		t.Fatalf("Acquire %s by %s: %v", p, member, err)
	}
	if l.Partition != p || l.Member != member {
		t.Fatalf("Acquire %s by %s returned %+v", p, member, l)
	}
	return l
}

func offset(t *testing.T, bs dedup.Offsets, p dedup.Partition) dedup.OffsetLease {
	t.Helper()
	l, err := bs.Offset(ctx(t), p)
	if err != nil {
		t.Fatalf("Offset %s: %v", p, err)
	}
	return l
}

// wantRow fails unless p's stored row has token and next.
func wantRow(t *testing.T, bs dedup.Offsets, p dedup.Partition, token, next int64) {
	t.Helper()
	if got := offset(t, bs, p); got.Token != token || got.Next != next {
		t.Fatalf("stored row of %s: token %d next %d, want token %d next %d", p, got.Token, got.Next, token, next)
	}
}

// wantNothing fails unless every key is absent and no id is inserted:
// what a refused commit leaves.
func wantNothing(t *testing.T, st dedup.Store, ins Inserts, keys, ids []string) {
	t.Helper()
	for _, k := range keys {
		if r, err := st.Get(ctx(t), k); !errors.Is(err, dedup.ErrNotFound) {
			t.Fatalf("a refused commit left key %s: %+v, %v", k, r, err)
		}
	}
	for _, id := range ids {
		if ins.Inserted(t, id) {
			t.Fatalf("a refused commit applied the write of %s", id)
		}
	}
}

func keys(t *testing.T, n int) []string {
	ks := make([]string, n)
	base := key(t)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s-%d", base, i)
	}
	return ks
}

func ids(t *testing.T, n int) []string { return keys(t, n) }

// commit is a Commit at +10s whose keys are kept for an hour.
func commit(l dedup.OffsetLease, from, next int64, writes []dedup.Write, keys []string) dedup.OffsetCommit {
	return dedup.OffsetCommit{Lease: l, From: from, Next: next, Writes: writes, Keys: keys, Now: at(10), ExpiresAt: at(3600)}
}

func insertsOf(ins Inserts, ids ...string) []dedup.Write {
	ws := make([]dedup.Write, len(ids))
	for i, id := range ids {
		ws[i] = ins.Insert(id)
	}
	return ws
}

// batchAcquire: a partition without a row reads ErrNotFound; Acquire
// creates its row with Next -1, and each Acquire, by any member, raises
// the token and keeps Next.
func (s *suite) batchAcquire(t *testing.T, _ dedup.Store, bs dedup.Offsets) {
	p := partition(t)
	if _, err := bs.Offset(ctx(t), p); !errors.Is(err, dedup.ErrNoOffset) {
		t.Fatalf("Offset of a partition never acquired: %v, want dedup.ErrNoOffset", err)
	}
	a := acquire(t, bs, p, "member-a")
	if a.Next != -1 {
		t.Fatalf("first Acquire: Next %d, want -1", a.Next)
	}
	if got := offset(t, bs, p); got != a {
		t.Fatalf("Offset after Acquire %+v, want the lease %+v", got, a)
	}
	b := acquire(t, bs, p, "member-b")
	if b.Token <= a.Token || b.Next != -1 {
		t.Fatalf("second Acquire %+v after %+v: want a higher token and Next -1", b, a)
	}
	a2 := acquire(t, bs, p, "member-a")
	if a2.Token <= b.Token {
		t.Fatalf("third Acquire token %d after %d: want it raised", a2.Token, b.Token)
	}
	if got := offset(t, bs, p); got != a2 {
		t.Fatalf("Offset %+v, want the last lease %+v", got, a2)
	}
	if _, err := bs.Offset(ctx(t), dedup.Partition{Group: p.Group, Topic: p.Topic, Partition: 4}); !errors.Is(err, dedup.ErrNoOffset) {
		t.Fatalf("Offset of the next partition: %v, want dedup.ErrNoOffset", err)
	}
}

// batchCommit: a commit moves the row's next offset and applies its
// writes; the first commit starts anywhere (the row's Next is -1), each
// later one where the last ended; an empty batch moves the offset alone;
// a member acquiring again resumes from the stored offset.
func (s *suite) batchCommit(t *testing.T, st dedup.Store, bs dedup.Offsets) {
	ins := s.inserts(t, st)
	p, id := partition(t), ids(t, 3)
	l := acquire(t, bs, p, "member-a")
	if err := bs.Commit(ctx(t), commit(l, 42, 50, insertsOf(ins, id[0], id[1]), nil)); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	wantRow(t, bs, p, l.Token, 50)
	if !ins.Inserted(t, id[0]) || !ins.Inserted(t, id[1]) {
		t.Fatal("a commit's writes not applied")
	}
	if err := bs.Commit(ctx(t), commit(l, 50, 51, insertsOf(ins, id[2]), nil)); err != nil {
		t.Fatalf("second commit: %v", err)
	}
	if err := bs.Commit(ctx(t), commit(l, 51, 60, nil, nil)); err != nil {
		t.Fatalf("commit without writes: %v", err)
	}
	wantRow(t, bs, p, l.Token, 60)
	if !ins.Inserted(t, id[2]) {
		t.Fatal("the second commit's write not applied")
	}
	again := acquire(t, bs, p, "member-a")
	if again.Next != 60 || again.Token <= l.Token {
		t.Fatalf("Acquire after commits %+v: want Next 60 and a token above %d", again, l.Token)
	}
}

// batchZombie: member A acquires, member B acquires the same partition
// (a rebalance A has not seen), A's commit is refused with ErrFenced and
// writes nothing, B's is accepted.
func (s *suite) batchZombie(t *testing.T, st dedup.Store, bs dedup.Offsets) {
	ins := s.inserts(t, st)
	p, id, ks := partition(t), ids(t, 2), keys(t, 2)
	a := acquire(t, bs, p, "member-a")
	b := acquire(t, bs, p, "member-b")
	err := bs.Commit(ctx(t), commit(a, 0, 10, insertsOf(ins, id[0]), ks[:1]))
	if !errors.Is(err, dedup.ErrFenced) {
		t.Fatalf("zombie commit: %v, want dedup.ErrFenced", err)
	}
	wantNothing(t, st, ins, ks[:1], id[:1])
	wantRow(t, bs, p, b.Token, -1)
	if err := bs.Commit(ctx(t), commit(b, 0, 10, insertsOf(ins, id[1]), ks[1:])); err != nil {
		t.Fatalf("the new member's commit: %v", err)
	}
	wantRow(t, bs, p, b.Token, 10)
	// The zombie stays fenced with the offset it would have continued at.
	if err := bs.Commit(ctx(t), commit(a, 10, 20, nil, nil)); !errors.Is(err, dedup.ErrFenced) {
		t.Fatalf("zombie commit after the new member's: %v, want dedup.ErrFenced", err)
	}
	wantRow(t, bs, p, b.Token, 10)
	// A lease for a partition never acquired fences too.
	ghost := dedup.OffsetLease{Partition: partition(t), Member: "member-a", Token: a.Token, Next: -1}
	if err := bs.Commit(ctx(t), commit(ghost, 0, 10, nil, nil)); !errors.Is(err, dedup.ErrFenced) {
		t.Fatalf("commit on a partition without a row: %v, want dedup.ErrFenced", err)
	}
}

// batchMismatch: a commit whose From is not the stored next offset (the
// same batch again, one behind, one past a gap) is refused with
// ErrOffsetMismatch and writes nothing.
func (s *suite) batchMismatch(t *testing.T, st dedup.Store, bs dedup.Offsets) {
	ins := s.inserts(t, st)
	p := partition(t)
	l := acquire(t, bs, p, "member-a")
	if err := bs.Commit(ctx(t), commit(l, 0, 10, nil, nil)); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	for _, from := range []int64{0, 5, 11} {
		id, ks := ids(t, 1), keys(t, 1)
		err := bs.Commit(ctx(t), commit(l, from, from+5, insertsOf(ins, id...), ks))
		if !errors.Is(err, dedup.ErrOffsetMismatch) {
			t.Fatalf("commit from %d with the stored next at 10: %v, want dedup.ErrOffsetMismatch", from, err)
		}
		wantNothing(t, st, ins, ks, id)
		wantRow(t, bs, p, l.Token, 10)
	}
}

// batchCondition: a write whose own condition fails cancels the whole
// commit with a *dedup.BusinessConditionError naming it: no write, no
// key, the next offset where it was.
func (s *suite) batchCondition(t *testing.T, st dedup.Store, bs dedup.Offsets) {
	ins := s.inserts(t, st)
	p, id, ks := partition(t), ids(t, 3), keys(t, 2)
	l := acquire(t, bs, p, "member-a")
	if err := bs.Commit(ctx(t), commit(l, 0, 10, insertsOf(ins, id[0]), nil)); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	err := bs.Commit(ctx(t), commit(l, 10, 20, insertsOf(ins, id[1], id[0], id[2]), ks))
	var be *dedup.BusinessConditionError
	if !errors.As(err, &be) || be.Index != 1 {
		t.Fatalf("commit with a write whose condition fails: %v, want a *dedup.BusinessConditionError for write 1", err)
	}
	wantNothing(t, st, ins, ks, id[1:])
	wantRow(t, bs, p, l.Token, 10)
	if err := bs.Commit(ctx(t), commit(l, 10, 20, insertsOf(ins, id[1], id[2]), ks)); err != nil {
		t.Fatalf("the batch again without the failing write: %v", err)
	}
	wantRow(t, bs, p, l.Token, 20)
}

// batchKeys: a commit's Keys become COMPLETED records, with their
// payload hashes, expiring at the commit's ExpiresAt, that a per-message
// claim finds completed; a key whose record has expired is claimed
// again, and one committed without hashes holds none.
func (s *suite) batchKeys(t *testing.T, st dedup.Store, bs dedup.Offsets) {
	p, ks := partition(t), keys(t, 3)
	l := acquire(t, bs, p, "member-a")
	c := commit(l, 0, 2, nil, ks[:2])
	c.PayloadHashes = []string{"h0", "h1"}
	if err := bs.Commit(ctx(t), c); err != nil {
		t.Fatalf("commit with keys: %v", err)
	}
	for i, k := range ks[:2] {
		r := get(t, st, k)
		if r.Status != dedup.StatusCompleted || !r.ExpiresAt.Equal(at(3600)) || r.PayloadHash != c.PayloadHashes[i] {
			t.Fatalf("key %d of a committed batch: %+v, want COMPLETED until %v with payload hash %s", i, r, at(3600), c.PayloadHashes[i])
		}
		if e := mustLose(t, claim(t, st, k, "per-message", c.PayloadHashes[i], 20, 50), dedup.StatusCompleted); e.PayloadHash != c.PayloadHashes[i] {
			t.Fatalf("a per-message claim of key %d met payload hash %q, want %q", i, e.PayloadHash, c.PayloadHashes[i])
		}
	}
	// A key whose record expired (a COMPLETED record past its retention)
	// is a new message: claimed again.
	c = dedup.OffsetCommit{Lease: l, From: 2, Next: 3, Keys: ks[2:], Now: at(10), ExpiresAt: at(100)}
	if err := bs.Commit(ctx(t), c); err != nil {
		t.Fatalf("commit with a key: %v", err)
	}
	c = dedup.OffsetCommit{Lease: l, From: 3, Next: 4, Keys: ks[2:], Now: at(200), ExpiresAt: at(3600)}
	if err := bs.Commit(ctx(t), c); err != nil {
		t.Fatalf("commit with a key past its retention: %v", err)
	}
	if r := get(t, st, ks[2]); r.Status != dedup.StatusCompleted || !r.ExpiresAt.Equal(at(3600)) || r.PayloadHash != "" {
		t.Fatalf("key claimed again: %+v, want COMPLETED until %v", r, at(3600))
	}
	wantRow(t, bs, p, l.Token, 4)
}

// batchDuplicateKeys: a commit holding keys already COMPLETED (by an
// earlier batch or a per-message run), live in another state (a message
// being processed per message), or repeated within its Keys, is refused
// with a *dedup.DuplicateKeysError naming exactly those indexes, and
// nothing is committed.
func (s *suite) batchDuplicateKeys(t *testing.T, st dedup.Store, bs dedup.Offsets) {
	ins := s.inserts(t, st)
	p, ks, id := partition(t), keys(t, 6), ids(t, 1)
	l := acquire(t, bs, p, "member-a")
	if err := bs.Commit(ctx(t), commit(l, 0, 1, nil, ks[:1])); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	done := mustAcquire(t, claim(t, st, ks[1], "per-message", "h1", 0, 30), 1)
	if err := complete(t, st, done, "ok", 1, 3600); err != nil {
		t.Fatalf("complete per message: %v", err)
	}
	mustAcquire(t, claim(t, st, ks[2], "per-message", "h1", 5, 60), 1)
	// ks[0] by the batch, ks[1] completed, ks[2] pending, ks[3] twice.
	batchKeys := []string{ks[3], ks[0], ks[4], ks[1], ks[2], ks[3], ks[5]}
	err := bs.Commit(ctx(t), commit(l, 1, 8, insertsOf(ins, id...), batchKeys))
	var de *dedup.DuplicateKeysError
	if !errors.As(err, &de) {
		t.Fatalf("commit with duplicate keys: %v, want a *dedup.DuplicateKeysError", err)
	}
	// A key repeated within Keys is named first, before any store call
	// (dedup.OffsetCommit.Check); the keys stored are named once it is gone.
	if !slices.Equal(de.Indexes, []int{5}) {
		t.Fatalf("duplicate key indexes %v, want [5] (the repeat)", de.Indexes)
	}
	wantNothing(t, st, ins, []string{ks[3], ks[4], ks[5]}, id)
	err = bs.Commit(ctx(t), commit(l, 1, 8, insertsOf(ins, id...), batchKeys[:5]))
	if !errors.As(err, &de) || !slices.Equal(de.Indexes, []int{1, 3, 4}) {
		t.Fatalf("commit with stored duplicate keys: %v, want a *dedup.DuplicateKeysError for [1 3 4]", err)
	}
	wantNothing(t, st, ins, []string{ks[3], ks[4]}, id)
	wantRow(t, bs, p, l.Token, 1)
	if err := bs.Commit(ctx(t), commit(l, 1, 8, insertsOf(ins, id...), []string{ks[3], ks[4], ks[5]})); err != nil {
		t.Fatalf("the batch again without its duplicates: %v", err)
	}
	wantRow(t, bs, p, l.Token, 8)
}

// batchTooLarge: a commit of as many items as the Store's bound
// (Options.BatchMax: the offset row, the writes and the keys) commits;
// one more is refused with a *dedup.CommitTooLargeError and commits nothing.
func (s *suite) batchTooLarge(t *testing.T, st dedup.Store, bs dedup.Offsets) {
	max := s.opts.BatchMax
	if max == 0 {
		t.Skip("the Store has no bound on a commit (Options.BatchMax)")
	}
	ins := s.inserts(t, st)
	p, id, ks := partition(t), ids(t, 3), keys(t, max-2)
	l := acquire(t, bs, p, "member-a")
	err := bs.Commit(ctx(t), commit(l, 0, 10, insertsOf(ins, id[0], id[1]), ks))
	var te *dedup.CommitTooLargeError
	if !errors.As(err, &te) || te.Items != max+1 || te.Max != max {
		t.Fatalf("commit of %d items: %v, want a *dedup.CommitTooLargeError of %d items, at most %d", max+1, err, max+1, max)
	}
	wantNothing(t, st, ins, ks, id[:2])
	wantRow(t, bs, p, l.Token, -1)
	if err := bs.Commit(ctx(t), commit(l, 0, 10, insertsOf(ins, id[2]), ks)); err != nil {
		t.Fatalf("commit of %d items, the bound: %v", max, err)
	}
	wantRow(t, bs, p, l.Token, 10)
	if !ins.Inserted(t, id[2]) {
		t.Fatal("the commit at the bound did not apply its write")
	}
}

// batchInvalid: a commit no Store can take is refused, typed, before
// anything is written.
func (s *suite) batchInvalid(t *testing.T, st dedup.Store, bs dedup.Offsets) {
	p, ks := partition(t), keys(t, 1)
	l := acquire(t, bs, p, "member-a")
	bad := map[string]dedup.OffsetCommit{
		"negative From":   commit(l, -1, 10, nil, nil),
		"Next < From":     commit(l, 10, 9, nil, nil),
		"empty key":       commit(l, 0, 10, nil, []string{ks[0], ""}),
		"keys expire now": {Lease: l, From: 0, Next: 10, Keys: ks, Now: at(10), ExpiresAt: at(10)},
		"keys no expiry":  {Lease: l, From: 0, Next: 10, Keys: ks, Now: at(10)},
		"hashes not one per key": {Lease: l, From: 0, Next: 10, Keys: ks, Now: at(10), ExpiresAt: at(3600),
			PayloadHashes: []string{"h0", "h1"}},
		"hashes without keys": {Lease: l, From: 0, Next: 10, Now: at(10), PayloadHashes: []string{"h0"}},
	}
	for name, c := range bad {
		if err := bs.Commit(ctx(t), c); !errors.Is(err, dedup.ErrInvalidCommit) {
			t.Fatalf("commit with %s: %v, want dedup.ErrInvalidCommit", name, err)
		}
	}
	if err := bs.Commit(ctx(t), commit(l, 0, 10, []dedup.Write{nil}, nil)); !errors.Is(err, dedup.ErrNilWrite) {
		t.Fatalf("commit with a nil write: %v, want dedup.ErrNilWrite", err)
	}
	if err := bs.Commit(ctx(t), commit(l, 0, 10, []dedup.Write{nonsenseWrite{1}}, nil)); !errors.Is(err, dedup.ErrUnsupportedWrite) {
		t.Fatalf("commit with a write of no Store: %v, want dedup.ErrUnsupportedWrite", err)
	}
	wantNothing(t, st, Inserts{}, ks, nil)
	wantRow(t, bs, p, l.Token, -1)
}

// batchRace: two members acquire a partition at the same time, then
// both commit the same next batch at the same time: each round exactly
// one commit lands, the one whose token the row holds (the later
// Acquire's), and the other is fenced with its write not applied.
func (s *suite) batchRace(t *testing.T, st dedup.Store, bs dedup.Offsets) {
	ins := s.inserts(t, st)
	p := partition(t)
	rounds := max(s.opts.RaceRounds/20, 5)
	members := []string{"member-a", "member-b"}
	next := int64(0)
	for round := range rounds {
		leases := make([]dedup.OffsetLease, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		run := func(f func(i int)) {
			start := make(chan struct{})
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					f(i)
				}()
			}
			close(start)
			wg.Wait()
		}
		run(func(i int) { leases[i], errs[i] = bs.Acquire(context.Background(), p, members[i]) })
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: Acquire by %s: %v", round, members[i], err)
			}
		}
		if leases[0].Token == leases[1].Token {
			t.Fatalf("round %d: both members hold token %d", round, leases[0].Token)
		}
		id := ids(t, 2)
		from := next
		run(func(i int) {
			errs[i] = bs.Commit(context.Background(), commit(leases[i], from, from+1, insertsOf(ins, id[i]), nil))
		})
		win := 0
		if leases[1].Token > leases[0].Token {
			win = 1
		}
		if errs[win] != nil || !errors.Is(errs[1-win], dedup.ErrFenced) {
			t.Fatalf("round %d: commits %v (token %d) and %v (token %d): want the higher token's to land, the other fenced",
				round, errs[0], leases[0].Token, errs[1], leases[1].Token)
		}
		if !ins.Inserted(t, id[win]) || ins.Inserted(t, id[1-win]) {
			t.Fatalf("round %d: the winner's write applied %v, the fenced one's %v", round, ins.Inserted(t, id[win]), ins.Inserted(t, id[1-win]))
		}
		next++
		wantRow(t, bs, p, leases[win].Token, next)
	}
}
