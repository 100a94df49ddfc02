package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/retry"
)

// outboxCases runs the outbox cases over a Store whose Capabilities give
// the relay's view of its outbox (Capabilities.Outbox), and over any
// other checks that it refuses what it cannot commit. The Store's outbox may hold other cases' entries (a shared
// table): each case sends to a destination of its own and looks at its
// own entries only.
func (s *suite) outboxCases(t *testing.T, st dedup.Store) {
	ob := st.Capabilities().Outbox
	if ob == nil {
		s.outboxRefused(t, st)
		return
	}
	cases := []struct {
		name string
		fn   func(t *testing.T, st dedup.Store, ob outbox.Store)
	}{
		{"CommitsWithCompleted", s.outboxCommits},
		{"NeverWithoutCompleted", s.outboxNeverWithoutCompleted},
		{"ClaimComplete", s.outboxClaimComplete},
		{"TwoRelaysNeverLeaseOneEntry", s.outboxTwoRelays},
		{"LaneOrderKept", s.outboxLaneOrder},
		{"LaneOrderFollowsCommitsNotClocks", s.outboxLaneOrderAcrossClocks},
		{"DeadNeverBlocks", s.outboxDeadNeverBlocks},
		{"LostLeaseMarksRefused", s.outboxLostLease},
		{"GiveBackKeepsAttempts", s.outboxGiveBackKeepsAttempts},
		{"MarksKeptUntilRetention", s.outboxRetention},
		{"EntriesLists", s.outboxEntries},
		{"MissingTableStopsRelay", s.outboxMissingTable},
		{"ReplacedEntryFencesOldLease", s.outboxReplacedFenced},
		{"RequeueDead", s.outboxRequeue},
		{"EntriesPaged", s.outboxEntriesPaged},
		{"ReviewEntriesPagedThroughChanges", s.outboxEntriesPagedThroughChanges},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, st, ob) })
	}
}

// outboxRefused: a Store without the capability refuses a commit with
// outgoing messages (dedup.ErrUnsupportedWrite), committing nothing, and
// a Guard that is to send onward is refused over it at start.
func (s *suite) outboxRefused(t *testing.T, st dedup.Store) {
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	msgs := []outbox.Message{{Destination: "d", Body: []byte("b")}}
	err := st.Complete(ctx(t), dedup.CompleteRequest{Lease: l, Response: []byte("x"), Now: at(1), ExpiresAt: at(3600), Outbox: msgs})
	if !errors.Is(err, dedup.ErrUnsupportedWrite) {
		t.Fatalf("Complete with outgoing messages over a Store without Outbox: %v, want dedup.ErrUnsupportedWrite", err)
	}
	if r := get(t, st, k); r.Status != dedup.StatusPending {
		t.Fatalf("a refused Complete changed the record: %+v", r)
	}
	if st.Capabilities().ClaimComplete {
		_, err := st.ClaimComplete(ctx(t), dedup.ClaimCompleteRequest{Key: key(t), Owner: "a", Now: at(0), ExpiresAt: at(3600), Outbox: msgs})
		if !errors.Is(err, dedup.ErrUnsupportedWrite) {
			t.Fatalf("ClaimComplete with outgoing messages over a Store without Outbox: %v, want dedup.ErrUnsupportedWrite", err)
		}
	}
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	opts := []consumer.GuardOption{consumer.SendsOnward()}
	if st.Capabilities().TenantKeyed {
		opts = append(opts, consumer.WithTenantFunc(func(*consumer.Message) (string, error) { return "t", nil }))
	}
	if _, err := consumer.NewGuard(st, h, opts...); !errors.Is(err, consumer.ErrOutboxUnsupported) {
		t.Fatalf("NewGuard with SendsOnward over a Store without Outbox: %v, want consumer.ErrOutboxUnsupported", err)
	}
}

// destination is a destination no other case sends to.
func destination(t *testing.T) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "storetest-" + hex.EncodeToString(b)
}

// send commits msgs with a fresh key's COMPLETED record at now, and
// returns the key.
func send(t *testing.T, st dedup.Store, now int, msgs ...outbox.Message) string {
	t.Helper()
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", now, now+30), 1)
	if err := st.Complete(ctx(t), dedup.CompleteRequest{Lease: l, Response: []byte("ok"), Now: at(now), ExpiresAt: at(now + 3600), Outbox: msgs}); err != nil {
		t.Fatalf("Complete with %d outgoing messages: %v", len(msgs), err)
	}
	return k
}

func msg(dest, orderingKey, body string) outbox.Message {
	return outbox.Message{Destination: dest, OrderingKey: orderingKey, Body: []byte(body)}
}

// leaseMax is the Max of the suite's leases: enough for its own entries
// and any other case's left in a shared outbox.
const leaseMax = 1000

// lease leases, as owner at now until until, and returns the entries
// sent to dest, checking the rest of the answer as it goes: each lane's
// entries in Seq order, every returned entry leased to owner.
func lease(t *testing.T, ob outbox.Store, dest, owner string, now, until int) []outbox.Entry {
	t.Helper()
	es, err := ob.Lease(ctx(t), outbox.LeaseRequest{Owner: owner, Now: at(now), LeaseUntil: at(until), Max: leaseMax})
	if err != nil {
		t.Fatalf("Lease by %s at +%ds: %v", owner, now, err)
	}
	if len(es) > leaseMax {
		t.Fatalf("Lease returned %d entries, more than Max %d", len(es), leaseMax)
	}
	var mine []outbox.Entry
	for _, e := range es {
		if e.State != outbox.Pending || e.Lease.Owner != owner || e.Lease.ID != e.ID {
			t.Fatalf("leased entry %s: state %s, lease %+v; want Pending, leased to %s", e.ID, e.State, e.Lease, owner)
		}
		if e.Destination == dest {
			mine = append(mine, e)
		}
	}
	checkLaneOrder(t, mine)
	return mine
}

// checkLaneOrder fails unless the entries of each ordered lane come in
// rising Seq.
func checkLaneOrder(t *testing.T, es []outbox.Entry) {
	t.Helper()
	last := map[string]int64{}
	for _, e := range es {
		if e.OrderingKey == "" {
			continue
		}
		if s, ok := last[e.OrderingKey]; ok && e.Seq <= s {
			t.Fatalf("lane %q: entry %s of Seq %d after Seq %d", e.OrderingKey, e.ID, e.Seq, s)
		}
		last[e.OrderingKey] = e.Seq
	}
}

// entries lists the stored entries sent to dest in state ("": all).
func entries(t *testing.T, ob outbox.Store, dest string, state outbox.State) []outbox.Entry {
	t.Helper()
	es, err := ob.Entries(ctx(t), state, 100000)
	if err != nil {
		t.Fatalf("Entries(%q): %v", state, err)
	}
	var mine []outbox.Entry
	for _, e := range es {
		if state != "" && e.State != state {
			t.Fatalf("Entries(%q) listed entry %s in state %s", state, e.ID, e.State)
		}
		if e.Destination == dest {
			mine = append(mine, e)
		}
	}
	checkLaneOrder(t, mine)
	return mine
}

func entryIDs(es []outbox.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func byID(es []outbox.Entry) map[string]outbox.Entry {
	m := make(map[string]outbox.Entry, len(es))
	for _, e := range es {
		m[e.ID] = e
	}
	return m
}

func leases(es ...outbox.Entry) []outbox.Lease {
	out := make([]outbox.Lease, len(es))
	for i, e := range es {
		out[i] = e.Lease
	}
	return out
}

// sameIDs fails unless got holds exactly want's IDs, in any order.
func sameIDs(t *testing.T, what string, got []outbox.Entry, want ...string) {
	t.Helper()
	g := slices.Sorted(slices.Values(entryIDs(got)))
	w := slices.Sorted(slices.Values(want))
	if !slices.Equal(g, w) {
		t.Fatalf("%s: entries %q, want %q", what, g, w)
	}
}

// outboxCommits: a Complete's outgoing messages are stored as Pending
// entries, as they were given, with IDs from the key and index and Seq
// rising along each lane; a duplicate adds none.
func (s *suite) outboxCommits(t *testing.T, st dedup.Store, ob outbox.Store) {
	dest := destination(t)
	m0 := outbox.Message{Destination: dest, OrderingKey: "A", Body: []byte("first\x00\xff"), Headers: map[string]string{"type": "order.reserved", "n": "1"}}
	k := send(t, st, 1, m0, msg(dest, "A", "second"), msg(dest, "", "unordered"))
	k2 := send(t, st, 2, msg(dest, "A", "third"))
	if r := get(t, st, k); r.Status != dedup.StatusCompleted {
		t.Fatalf("record %+v, want COMPLETED", r)
	}
	got := entries(t, ob, dest, outbox.Pending)
	sameIDs(t, "after two commits", got, outbox.ID(k, 0), outbox.ID(k, 1), outbox.ID(k, 2), outbox.ID(k2, 0))
	byID := byID(got)
	first := byID[outbox.ID(k, 0)]
	if string(first.Body) != string(m0.Body) || first.OrderingKey != "A" || first.Headers["type"] != "order.reserved" ||
		first.Headers["n"] != "1" || len(first.Headers) != 2 || first.Attempts != 0 || first.LastError != "" {
		t.Fatalf("entry %+v, want message 0 as it was given", first)
	}
	if d := first.CreatedAt.Sub(at(1)); d < -time.Second || d > time.Second {
		t.Fatalf("entry created at %v, want the commit's Now %v", first.CreatedAt, at(1))
	}
	if !(byID[outbox.ID(k, 0)].Seq < byID[outbox.ID(k, 1)].Seq && byID[outbox.ID(k, 1)].Seq < byID[outbox.ID(k2, 0)].Seq) {
		t.Fatalf("lane A's Seq %d, %d, %d: want rising in commit order", byID[outbox.ID(k, 0)].Seq, byID[outbox.ID(k, 1)].Seq, byID[outbox.ID(k2, 0)].Seq)
	}
	if string(byID[outbox.ID(k, 2)].Body) != "unordered" || string(byID[outbox.ID(k2, 0)].Body) != "third" {
		t.Fatalf("entries %+v: bodies mixed up", got)
	}
	// Duplicates: a claim loses, a one-round-trip commit finds the record.
	mustLose(t, claim(t, st, k, "b", "h1", 3, 33), dedup.StatusCompleted)
	if st.Capabilities().ClaimComplete {
		c, err := st.ClaimComplete(ctx(t), dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h1", Owner: "b", Response: []byte("ok"),
			Now: at(3), ExpiresAt: at(3600), Outbox: []outbox.Message{msg(dest, "A", "again")}})
		if err != nil || c.Acquired {
			t.Fatalf("ClaimComplete of a duplicate: %+v, %v; want the live record", c, err)
		}
	}
	sameIDs(t, "after the duplicate", entries(t, ob, dest, ""), outbox.ID(k, 0), outbox.ID(k, 1), outbox.ID(k, 2), outbox.ID(k2, 0))
}

// outboxNeverWithoutCompleted: a commit the Store refuses (a business
// write's condition failed, an unknown or nil write, a response over the
// limit, a lease lost) writes no entry; a Fail writes none.
func (s *suite) outboxNeverWithoutCompleted(t *testing.T, st dedup.Store, ob outbox.Store) {
	dest := destination(t)
	msgs := []outbox.Message{msg(dest, "A", "1"), msg(dest, "", "2")}
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	refusals := map[string][]dedup.Write{"an unknown write": {nonsenseWrite{1}}, "a nil write": {nil}}
	if s.opts.RejectingWrite != nil {
		refusals["a rejecting write"] = []dedup.Write{s.opts.RejectingWrite()}
	}
	for name, writes := range refusals {
		if err := st.Complete(ctx(t), dedup.CompleteRequest{Lease: l, Response: []byte("x"), Now: at(1), ExpiresAt: at(3600),
			Writes: writes, Outbox: msgs}); err == nil {
			t.Fatalf("Complete with %s: no error", name)
		}
		if st.Capabilities().ClaimComplete {
			c, err := st.ClaimComplete(ctx(t), dedup.ClaimCompleteRequest{Key: key(t), Owner: "a", Response: []byte("x"), Now: at(1), ExpiresAt: at(3600),
				Writes: writes, Outbox: msgs})
			if err == nil {
				t.Fatalf("ClaimComplete with %s: no error (%+v)", name, c)
			}
		}
	}
	max := s.opts.MaxResponseSize
	if max <= 0 {
		max = dedup.DefaultMaxResponseSize
	}
	if err := st.Complete(ctx(t), dedup.CompleteRequest{Lease: l, Response: make([]byte, max+1), Now: at(1), ExpiresAt: at(3600), Outbox: msgs}); !errors.Is(err, dedup.ErrResponseTooLarge) {
		t.Fatalf("Complete with a response over the limit: %v, want dedup.ErrResponseTooLarge", err)
	}
	if es := entries(t, ob, dest, ""); len(es) != 0 {
		t.Fatalf("refused commits left entries %q", entryIDs(es))
	}
	// A failed run writes none; the lease it lost commits none.
	if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: "x", Now: at(2), RetryAt: at(3)}); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	l2 := mustAcquire(t, claim(t, st, k, "b", "h1", 4, 10), 2)
	if err := st.Complete(ctx(t), dedup.CompleteRequest{Lease: l, Response: []byte("x"), Now: at(5), ExpiresAt: at(3600), Outbox: msgs}); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("Complete with a lost lease: %v, want ErrLeaseLost", err)
	}
	if es := entries(t, ob, dest, ""); len(es) != 0 {
		t.Fatalf("a Fail and a lost lease left entries %q", entryIDs(es))
	}
	// The lease that holds commits them, once.
	if err := st.Complete(ctx(t), dedup.CompleteRequest{Lease: l2, Response: []byte("x"), Now: at(5), ExpiresAt: at(3600), Outbox: msgs}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	sameIDs(t, "after the commit", entries(t, ob, dest, outbox.Pending), outbox.ID(k, 0), outbox.ID(k, 1))
}

// outboxClaimComplete: a one-round-trip commit stores its outgoing
// messages with COMPLETED, and a second one for the key adds none.
func (s *suite) outboxClaimComplete(t *testing.T, st dedup.Store, ob outbox.Store) {
	if !st.Capabilities().ClaimComplete {
		t.Skip("the Store has no ClaimComplete")
	}
	dest := destination(t)
	k := key(t)
	for i := range 2 {
		c, err := st.ClaimComplete(ctx(t), dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h1", Owner: fmt.Sprint("o", i), Response: []byte("ok"),
			Now: at(i), ExpiresAt: at(3600), Outbox: []outbox.Message{msg(dest, "A", "1"), msg(dest, "A", "2")}})
		if err != nil || c.Acquired != (i == 0) {
			t.Fatalf("ClaimComplete %d: %+v, %v", i+1, c, err)
		}
	}
	if r := get(t, st, k); r.Status != dedup.StatusCompleted || r.Owner != "o0" {
		t.Fatalf("record %+v, want COMPLETED by the first", r)
	}
	sameIDs(t, "after two one-round-trip commits", entries(t, ob, dest, outbox.Pending), outbox.ID(k, 0), outbox.ID(k, 1))
}

// outboxTwoRelays: relays leasing at once never hold one entry together,
// nor two entries of one lane; together they take every entry. Leases
// that ran out are taken over, on a new version, one relay winning.
func (s *suite) outboxTwoRelays(t *testing.T, st dedup.Store, ob outbox.Store) {
	dest := destination(t)
	var want []string
	for i := range 12 {
		k := send(t, st, 0, msg(dest, fmt.Sprint("lane", i%3), fmt.Sprint(i)), msg(dest, "", fmt.Sprint("u", i)))
		want = append(want, outbox.ID(k, 0), outbox.ID(k, 1))
	}
	race := func(now, until int) [][]outbox.Entry {
		t.Helper()
		const relays = 4
		got := make([][]outbox.Entry, relays)
		errs := make([]error, relays)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for r := range relays {
			wg.Go(func() {
				<-start
				es, err := ob.Lease(context.Background(), outbox.LeaseRequest{Owner: fmt.Sprint("relay", r), Now: at(now), LeaseUntil: at(until), Max: leaseMax})
				errs[r] = err
				for _, e := range es {
					if e.Destination == dest {
						got[r] = append(got[r], e)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		seen, lanes := map[string]int{}, map[string]int{}
		var all []outbox.Entry
		for r, es := range got {
			if errs[r] != nil {
				t.Fatalf("relay %d: Lease: %v", r, errs[r])
			}
			checkLaneOrder(t, es)
			for _, e := range es {
				if o, ok := seen[e.ID]; ok {
					t.Fatalf("entry %s leased by relays %d and %d at once", e.ID, o, r)
				}
				seen[e.ID] = r
				if e.OrderingKey == "" {
					continue
				}
				if o, ok := lanes[e.OrderingKey]; ok && o != r {
					t.Fatalf("lane %s leased by relays %d and %d at once", e.OrderingKey, o, r)
				}
				lanes[e.OrderingKey] = r
			}
			all = append(all, es...)
		}
		sameIDs(t, fmt.Sprintf("leased at +%ds", now), all, want...)
		return got
	}
	first := race(1, 30)
	if again := lease(t, ob, dest, "late", 2, 30); len(again) != 0 {
		t.Fatalf("entries %q leased again while held", entryIDs(again))
	}
	second := race(31, 60) // the first leases ran out
	versions := map[string]int64{}
	for _, es := range first {
		for _, e := range es {
			versions[e.ID] = e.Lease.Version
		}
	}
	for _, es := range second {
		for _, e := range es {
			if e.Lease.Version <= versions[e.ID] {
				t.Fatalf("entry %s taken over on version %d, the first lease's was %d", e.ID, e.Lease.Version, versions[e.ID])
			}
		}
	}
	for r, es := range second {
		if len(es) > 0 {
			if err := ob.Dispatched(ctx(t), leases(es...), at(32), at(3600)); err != nil {
				t.Fatalf("relay %d: Dispatched: %v", r, err)
			}
		}
	}
	sameIDs(t, "dispatched", entries(t, ob, dest, outbox.Dispatched), want...)
}

// outboxLaneOrder: an entry is leased only with every earlier Pending
// entry of its lane; an entry another relay holds, or one given back for
// a retry later, blocks the rest of its lane; entries with no ordering
// key block none.
func (s *suite) outboxLaneOrder(t *testing.T, st dedup.Store, ob outbox.Store) {
	dest := destination(t)
	k1 := send(t, st, 1, msg(dest, "A", "a1"), msg(dest, "", "u1"))
	got := lease(t, ob, dest, "r1", 1, 100)
	sameIDs(t, "r1's first lease", got, outbox.ID(k1, 0), outbox.ID(k1, 1))
	held := got
	// a2 and a3 wait behind a1, which r1 holds; u2 and b1 do not.
	k2 := send(t, st, 2, msg(dest, "A", "a2"), msg(dest, "", "u2"), msg(dest, "B", "b1"))
	k3 := send(t, st, 3, msg(dest, "A", "a3"))
	got = lease(t, ob, dest, "r2", 3, 100)
	sameIDs(t, "r2's lease while r1 holds a1", got, outbox.ID(k2, 1), outbox.ID(k2, 2))
	if err := ob.Dispatched(ctx(t), leases(got...), at(3), at(3600)); err != nil {
		t.Fatalf("Dispatched: %v", err)
	}
	// r1 sends a1: a2 and a3 follow, in order, in one lease.
	if err := ob.Dispatched(ctx(t), leases(held...), at(4), at(3600)); err != nil {
		t.Fatalf("Dispatched: %v", err)
	}
	got = lease(t, ob, dest, "r2", 5, 100)
	if !slices.Equal(entryIDs(got), []string{outbox.ID(k2, 0), outbox.ID(k3, 0)}) {
		t.Fatalf("lane A after a1: %q, want a2 then a3", entryIDs(got))
	}
	// a2 fails for a moment and is given back for +20s; a3, whose own
	// retry comes sooner, waits behind it.
	if err := ob.Retry(ctx(t), got[0].Lease, "throttled", at(6), at(20)); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if err := ob.Retry(ctx(t), got[1].Lease, "throttled", at(6), at(10)); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if got := lease(t, ob, dest, "r3", 15, 100); len(got) != 0 {
		t.Fatalf("leased %q while a2 waits for its retry: want none of lane A", entryIDs(got))
	}
	got = lease(t, ob, dest, "r3", 21, 100)
	if !slices.Equal(entryIDs(got), []string{outbox.ID(k2, 0), outbox.ID(k3, 0)}) || got[0].Attempts != 1 || got[0].LastError != "throttled" {
		t.Fatalf("lane A after the retry: %+v, want a2 (one attempt, its reason kept) then a3", got)
	}
	if err := ob.Dispatched(ctx(t), leases(got...), at(22), at(3600)); err != nil {
		t.Fatalf("Dispatched: %v", err)
	}
	if p := entries(t, ob, dest, outbox.Pending); len(p) != 0 {
		t.Fatalf("entries %q still Pending", entryIDs(p))
	}
}

// outboxLaneOrderAcrossClocks: a lane's entries are leased in the order
// they committed, whatever the committing workers' clocks say: a worker
// whose clock is 2s behind commits after another, and its entry comes
// second.
func (s *suite) outboxLaneOrderAcrossClocks(t *testing.T, st dedup.Store, ob outbox.Store) {
	peer := st
	if s.opts.Peer != nil {
		peer = s.opts.Peer(t, st)
	}
	dest := destination(t)
	k1 := send(t, st, 10, msg(dest, "A", "first"))
	k2 := send(t, peer, 8, msg(dest, "A", "second"))
	got := lease(t, ob, dest, "r", 11, 100)
	if want := []string{outbox.ID(k1, 0), outbox.ID(k2, 0)}; !slices.Equal(entryIDs(got), want) {
		t.Fatalf("lane A: %q, want %q: the order of their commits", entryIDs(got), want)
	}
}

// outboxDeadNeverBlocks: an entry marked Dead leaves its lane to the
// entries behind it.
func (s *suite) outboxDeadNeverBlocks(t *testing.T, st dedup.Store, ob outbox.Store) {
	dest := destination(t)
	k1 := send(t, st, 1, msg(dest, "A", "too large"))
	got := lease(t, ob, dest, "r1", 1, 100)
	sameIDs(t, "lease", got, outbox.ID(k1, 0))
	k2 := send(t, st, 2, msg(dest, "A", "fine"))
	if got := lease(t, ob, dest, "r2", 2, 100); len(got) != 0 {
		t.Fatalf("leased %q behind a held entry", entryIDs(got))
	}
	if err := ob.Dead(ctx(t), got[0].Lease, "message too large", at(3), at(3600)); err != nil {
		t.Fatalf("Dead: %v", err)
	}
	sameIDs(t, "lease after the dead one", lease(t, ob, dest, "r2", 4, 100), outbox.ID(k2, 0))
	dead := entries(t, ob, dest, outbox.Dead)
	if len(dead) != 1 || dead[0].ID != outbox.ID(k1, 0) || dead[0].LastError != "message too large" {
		t.Fatalf("dead entries %+v, want the first with its reason", dead)
	}
}

// outboxLostLease: marks with a lease since taken over, or one already
// used, are refused with outbox.ErrLeaseLost and change nothing; in a
// Dispatched of several, the rest are marked.
func (s *suite) outboxLostLease(t *testing.T, st dedup.Store, ob outbox.Store) {
	dest := destination(t)
	k := send(t, st, 1, msg(dest, "A", "1"), msg(dest, "B", "2"))
	old := lease(t, ob, dest, "r1", 1, 5)
	sameIDs(t, "r1's lease", old, outbox.ID(k, 0), outbox.ID(k, 1))
	cur := lease(t, ob, dest, "r2", 10, 40) // r1's lease ran out
	sameIDs(t, "r2's takeover", cur, outbox.ID(k, 0), outbox.ID(k, 1))
	for name, mark := range map[string]func() error{
		"Dispatched": func() error { return ob.Dispatched(ctx(t), leases(old...), at(11), at(3600)) },
		"Retry":      func() error { return ob.Retry(ctx(t), old[0].Lease, "x", at(11), at(12)) },
		"Release":    func() error { return ob.Release(ctx(t), old[0].Lease, "x", at(11), at(12)) },
		"Dead":       func() error { return ob.Dead(ctx(t), old[0].Lease, "x", at(11), at(3600)) },
	} {
		if err := mark(); !errors.Is(err, outbox.ErrLeaseLost) {
			t.Fatalf("%s with a lease taken over: %v, want outbox.ErrLeaseLost", name, err)
		}
	}
	if p := entries(t, ob, dest, outbox.Pending); len(p) != 2 {
		t.Fatalf("refused marks changed entries: Pending %q", entryIDs(p))
	}
	// One lease lost, one held: the held one is marked, the error says the other.
	err := ob.Dispatched(ctx(t), []outbox.Lease{old[0].Lease, cur[1].Lease}, at(12), at(3600))
	if !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("Dispatched of a lost and a held lease: %v, want outbox.ErrLeaseLost", err)
	}
	if msg := err.Error(); slices.ContainsFunc([]string{k, outbox.ID(k, 0)}, func(s string) bool { return strings.Contains(msg, s) }) {
		t.Fatalf("error text %q names a key", msg)
	}
	sameIDs(t, "dispatched", entries(t, ob, dest, outbox.Dispatched), cur[1].ID)
	// A lease used once is spent.
	if err := ob.Dispatched(ctx(t), leases(cur[1]), at(13), at(3600)); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("Dispatched twice: %v, want outbox.ErrLeaseLost", err)
	}
	if err := ob.Retry(ctx(t), cur[0].Lease, "x", at(13), at(14)); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if err := ob.Dead(ctx(t), cur[0].Lease, "x", at(13), at(3600)); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("Dead with a lease given back by Retry: %v, want outbox.ErrLeaseLost", err)
	}
	// The same relay taking an entry over from itself fences its own
	// older lease by version.
	mine := lease(t, ob, dest, "r2", 14, 20)
	sameIDs(t, "lease after the retry", mine, cur[0].ID)
	again := lease(t, ob, dest, "r2", 21, 40)
	sameIDs(t, "the same relay's takeover", again, cur[0].ID)
	if err := ob.Dispatched(ctx(t), leases(mine...), at(22), at(3600)); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("Dispatched with the relay's own older lease: %v, want outbox.ErrLeaseLost", err)
	}
	if err := ob.Dispatched(ctx(t), leases(again...), at(22), at(3600)); err != nil {
		t.Fatalf("Dispatched: %v", err)
	}
}

// outboxGiveBackKeepsAttempts: Release gives an entry back unsent, as a
// relay does with one held back behind a failed entry of its lane: it
// waits until its retry time, as one given back by Retry, on a new
// version (the lease given back fences nothing), with its reason, but
// counts a release rather than a failed attempt, so that its own first
// failure gets the first backoff.
func (s *suite) outboxGiveBackKeepsAttempts(t *testing.T, st dedup.Store, ob outbox.Store) {
	dest := destination(t)
	k := send(t, st, 1, msg(dest, "A", "a1"), msg(dest, "A", "a2"))
	first := lease(t, ob, dest, "r1", 1, 100)
	sameIDs(t, "r1's lease", first, outbox.ID(k, 0), outbox.ID(k, 1))
	if err := ob.Retry(ctx(t), first[0].Lease, "throttled", at(2), at(20)); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if err := ob.Release(ctx(t), first[1].Lease, "not sent: waits behind a1", at(2), at(20)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for name, mark := range map[string]func() error{
		"Dispatched": func() error { return ob.Dispatched(ctx(t), leases(first[1]), at(3), at(3600)) },
		"Release":    func() error { return ob.Release(ctx(t), first[1].Lease, "x", at(3), at(4)) },
		"Dead":       func() error { return ob.Dead(ctx(t), first[1].Lease, "x", at(3), at(3600)) },
	} {
		if err := mark(); !errors.Is(err, outbox.ErrLeaseLost) {
			t.Fatalf("%s with a lease given back by Release: %v, want outbox.ErrLeaseLost", name, err)
		}
	}
	listed := byID(entries(t, ob, dest, outbox.Pending))
	if e := listed[outbox.ID(k, 1)]; e.Attempts != 0 || e.Releases != 1 || e.LastError != "not sent: waits behind a1" {
		t.Fatalf("the released entry is listed as %+v, want no attempt, one release, its reason", e)
	}
	if got := lease(t, ob, dest, "r2", 10, 100); len(got) != 0 {
		t.Fatalf("leased %q before the retry time of both: want none", entryIDs(got))
	}
	got := lease(t, ob, dest, "r2", 21, 100)
	sameIDs(t, "the lease after the retry time", got, outbox.ID(k, 0), outbox.ID(k, 1))
	for i, want := range []struct{ attempts, releases int }{{1, 0}, {0, 1}} {
		e := got[i]
		if e.Attempts != want.attempts || e.Releases != want.releases || e.Lease.Version != first[i].Lease.Version+2 {
			t.Fatalf("entry %d leased again as attempts %d, releases %d, version %d; want %d, %d, %d (one lease and one give-back on)",
				i, e.Attempts, e.Releases, e.Lease.Version, want.attempts, want.releases, first[i].Lease.Version+2)
		}
	}
	if err := ob.Dispatched(ctx(t), leases(got...), at(22), at(3600)); err != nil {
		t.Fatalf("Dispatched: %v", err)
	}
}

// outboxRetention: Dispatched and Dead entries are kept until the
// retention they were marked with (to the second: a Store may keep
// expiries in whole seconds), with Dead's reason and Retry's count.
func (s *suite) outboxRetention(t *testing.T, st dedup.Store, ob outbox.Store) {
	dest := destination(t)
	k := send(t, st, 1, msg(dest, "A", "1"), msg(dest, "B", "2"))
	committed := byID(entries(t, ob, dest, ""))
	got := byID(lease(t, ob, dest, "r1", 1, 30))
	if err := ob.Retry(ctx(t), got[outbox.ID(k, 1)].Lease, "timeout", at(2), at(3)); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	again := lease(t, ob, dest, "r1", 4, 30)
	sameIDs(t, "lease after the retry", again, outbox.ID(k, 1))
	if err := ob.Dispatched(ctx(t), leases(got[outbox.ID(k, 0)]), at(5), at(3600)); err != nil {
		t.Fatalf("Dispatched: %v", err)
	}
	if err := ob.Dead(ctx(t), again[0].Lease, "no such queue", at(5), at(7200)); err != nil {
		t.Fatalf("Dead: %v", err)
	}
	within := func(got, want time.Time) bool { d := got.Sub(want); return d > -time.Second && d < time.Second }
	for _, e := range entries(t, ob, dest, "") {
		if c := committed[e.ID]; c.Seq != e.Seq || string(c.Body) != string(e.Body) {
			t.Fatalf("entry %s: Seq %d and body %q after its marks, %d and %q when committed: want them kept", e.ID, e.Seq, e.Body, c.Seq, c.Body)
		}
		switch e.ID {
		case outbox.ID(k, 0):
			if e.State != outbox.Dispatched || !within(e.ExpiresAt, at(3600)) || e.Attempts != 0 {
				t.Fatalf("dispatched entry %+v: want Dispatched, expiring at %v", e, at(3600))
			}
		case outbox.ID(k, 1):
			if e.State != outbox.Dead || !within(e.ExpiresAt, at(7200)) || e.Attempts != 1 || e.LastError != "no such queue" {
				t.Fatalf("dead entry %+v: want Dead, expiring at %v, one attempt, its reason kept", e, at(7200))
			}
		default:
			t.Fatalf("entry %s never sent", e.ID)
		}
	}
}

// outboxEntries: Entries lists by state, in Seq order per lane, and
// returns at most limit.
func (s *suite) outboxEntries(t *testing.T, st dedup.Store, ob outbox.Store) {
	dest := destination(t)
	k := send(t, st, 1, msg(dest, "A", "1"), msg(dest, "A", "2"), msg(dest, "A", "3"))
	got := lease(t, ob, dest, "r1", 1, 30)
	if err := ob.Dispatched(ctx(t), leases(got[0]), at(2), at(3600)); err != nil {
		t.Fatalf("Dispatched: %v", err)
	}
	sameIDs(t, "Pending", entries(t, ob, dest, outbox.Pending), outbox.ID(k, 1), outbox.ID(k, 2))
	sameIDs(t, "Dispatched", entries(t, ob, dest, outbox.Dispatched), outbox.ID(k, 0))
	if all := entries(t, ob, dest, ""); !slices.Equal(entryIDs(all), []string{outbox.ID(k, 0), outbox.ID(k, 1), outbox.ID(k, 2)}) {
		t.Fatalf("all entries %q, want the three in Seq order", entryIDs(all))
	}
	if es, err := ob.Entries(ctx(t), "", 1); err != nil || len(es) != 1 {
		t.Fatalf("Entries with limit 1: %d entries, %v", len(es), err)
	}
	// Max bounds a lease, and a lane cut by it is cut after a prefix.
	es, err := ob.Lease(ctx(t), outbox.LeaseRequest{Owner: "r2", Now: at(40), LeaseUntil: at(60), Max: 1})
	if err != nil || len(es) > 1 {
		t.Fatalf("Lease with Max 1: %d entries, %v", len(es), err)
	}
	if len(es) == 1 && es[0].Destination == dest && es[0].ID != outbox.ID(k, 1) {
		t.Fatalf("Lease with Max 1 took %s, not the lane's first Pending entry %s", es[0].ID, outbox.ID(k, 1))
	}
}

// outboxEntriesPaged: the outbox lists (outbox.Pager), over pages of two
// from the first to the last, each entry in the state asked once, and
// refuses a cursor it did not return with outbox.ErrBadCursor.
func (s *suite) outboxEntriesPaged(t *testing.T, st dedup.Store, ob outbox.Store) {
	p := ob
	dest := destination(t)
	k := send(t, st, 1, msg(dest, "A", "1"), msg(dest, "B", "2"), msg(dest, "C", "3"), msg(dest, "D", "4"), msg(dest, "E", "5"))
	ids := []string{outbox.ID(k, 0), outbox.ID(k, 1), outbox.ID(k, 2), outbox.ID(k, 3), outbox.ID(k, 4)}
	got := lease(t, ob, dest, "r1", 1, 30)
	sameIDs(t, "lease", got, ids...)
	slices.SortFunc(got, func(a, b outbox.Entry) int { return strings.Compare(a.ID, b.ID) })
	for _, e := range got[:3] {
		if err := ob.Dead(ctx(t), e.Lease, "no such queue", at(2), at(3600)); err != nil {
			t.Fatalf("Dead: %v", err)
		}
	}
	if err := ob.Dispatched(ctx(t), leases(got[3:]...), at(2), at(3600)); err != nil {
		t.Fatalf("Dispatched: %v", err)
	}
	pass := func(state outbox.State) []outbox.Entry {
		t.Helper()
		var mine []outbox.Entry
		cursor := ""
		for range 100000 {
			es, next, err := p.EntriesPage(ctx(t), state, cursor, 2)
			if err != nil {
				t.Fatalf("EntriesPage(%q): %v", state, err)
			}
			for _, e := range es {
				if state != "" && e.State != state {
					t.Fatalf("EntriesPage(%q) listed entry %s in state %s", state, e.ID, e.State)
				}
				if e.Destination == dest {
					mine = append(mine, e)
				}
			}
			if next == "" {
				return mine
			}
			cursor = next
		}
		t.Fatalf("EntriesPage(%q): no last page", state)
		return nil
	}
	sameIDs(t, "the Dead entries, paged", pass(outbox.Dead), entryIDs(got[:3])...)
	sameIDs(t, "all the entries, paged", pass(""), ids...)
	if _, _, err := p.EntriesPage(ctx(t), outbox.Dead, "not a cursor", 10); !errors.Is(err, outbox.ErrBadCursor) {
		t.Fatalf("EntriesPage with a cursor it did not return: %v, want outbox.ErrBadCursor", err)
	}
}

// outboxEntriesPagedThroughChanges: a pass over the Dead entries, a page
// of one at a time, lists each entry Dead through it once, while the
// entry listed first is requeued and goes Dead again behind the cursor
// (as onceq redrive's own move that fails again) and entries are added
// and go Dead meanwhile; that one is listed no second time, so a pass
// never comes back to what it changed. A cursor no page returned, a
// seq-like number included, is refused with outbox.ErrBadCursor.
func (s *suite) outboxEntriesPagedThroughChanges(t *testing.T, st dedup.Store, ob outbox.Store) {
	dest := destination(t)
	k := send(t, st, 1, msg(dest, "A", "1"), msg(dest, "B", "2"), msg(dest, "C", "3"), msg(dest, "D", "4"))
	for _, e := range lease(t, ob, dest, "r1", 1, 30) {
		if err := ob.Dead(ctx(t), e.Lease, "no such queue", at(2), at(3600)); err != nil {
			t.Fatalf("Dead: %v", err)
		}
	}
	listed := map[string]int{}
	changed, cursor := "", ""
	for range 100000 {
		es, next, err := ob.EntriesPage(ctx(t), outbox.Dead, cursor, 1)
		if err != nil {
			t.Fatalf("EntriesPage: %v", err)
		}
		for _, e := range es {
			if e.Destination != dest {
				continue
			}
			listed[e.ID]++
			if changed != "" {
				continue
			}
			changed = e.ID
			if err := ob.Requeue(ctx(t), e, "requeued", at(3)); err != nil {
				t.Fatalf("Requeue: %v", err)
			}
			again := send(t, st, 4, msg(dest, "E", "5"))
			for _, l := range lease(t, ob, dest, "r2", 5, 60) {
				if err := ob.Dead(ctx(t), l.Lease, "no such queue again", at(6), at(3600)); err != nil {
					t.Fatalf("Dead: %v", err)
				}
			}
			if es := entries(t, ob, dest, outbox.Dead); len(es) != 5 {
				t.Fatalf("Dead entries after the changes: %q, want the four and %s", entryIDs(es), outbox.ID(again, 0))
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	for i := range 4 {
		id := outbox.ID(k, i)
		if id != changed && listed[id] != 1 {
			t.Errorf("entry %s, Dead through the pass, listed %d times, want once", id, listed[id])
		}
	}
	if listed[changed] != 1 {
		t.Errorf("entry %s, requeued and Dead again behind the cursor, listed %d times, want once", changed, listed[changed])
	}
	for _, c := range []string{"0", "-1"} {
		if _, _, err := ob.EntriesPage(ctx(t), outbox.Dead, c, 10); !errors.Is(err, outbox.ErrBadCursor) {
			t.Errorf("EntriesPage with cursor %q, which no page returned: %v, want outbox.ErrBadCursor", c, err)
		}
	}
}

// outboxMissingTable: the outbox's Check over a table that does not
// exist fails naming the table, and a relay over it returns at start a
// Misconfigured error naming that table, and sends nothing; it never
// polls on.
func (s *suite) outboxMissingTable(t *testing.T, _ dedup.Store, _ outbox.Store) {
	if s.opts.MissingOutbox == nil {
		t.Skip("the Store has no outbox table to miss (Options.MissingOutbox)")
	}
	st, table := s.opts.MissingOutbox(t)
	ob := st.Capabilities().Outbox
	if ob == nil {
		t.Fatalf("the Store (%T) gives no relay's view", st)
	}
	if err := ob.Check(ctx(t)); err == nil || !strings.Contains(err.Error(), table) {
		t.Fatalf("the outbox's Check over a missing table: %v, want an error naming %s", err, table)
	}
	r, err := outbox.NewRelay(ob, neverSends{t}, outbox.PollInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// A bound: a relay that polls on returns nil when it ends.
	c, cancel := context.WithTimeout(ctx(t), 30*time.Second)
	defer cancel()
	err = r.Run(c)
	if err == nil || retry.Classify(err) != retry.Misconfigured || !strings.Contains(err.Error(), table) {
		t.Fatalf("Run over a missing outbox table: %v (%v), want a Misconfigured error naming %s at start", err, retry.Classify(err), table)
	}
	if at := testenv.EmptySegment(err.Error()); at != "" {
		t.Fatalf("Run over a missing outbox table: %q has an empty segment at %s", err, at)
	}
}

// neverSends fails the test on any send.
type neverSends struct{ t *testing.T }

func (n neverSends) Send(context.Context, []outbox.Entry) []error {
	n.t.Error("a relay over a missing outbox table sent entries")
	return nil
}

// outboxReplacedFenced: a key completed again after its record's
// retention, while its old entry is still pending and leased, commits an
// entry of the same ID, which either replaces the old one or waits behind
// it in its lane. Either way the old entry's lease never marks the new
// entry, which it never sent, even when the same relay (one owner token,
// as a relay's concurrent passes share) leases the new one.
func (s *suite) outboxReplacedFenced(t *testing.T, st dedup.Store, ob outbox.Store) {
	dest := destination(t)
	k := send(t, st, 1, msg(dest, "A", "old"))
	old := lease(t, ob, dest, "r1", 2, 7200)
	sameIDs(t, "the old entry's lease", old, outbox.ID(k, 0))
	// The record expired at +3601: the key is claimed and completed again.
	c := claim(t, st, k, "b", "h1", 3700, 3730)
	if !c.Acquired {
		t.Fatalf("claim after the record's retention: %+v, want it acquired", c)
	}
	if err := st.Complete(ctx(t), dedup.CompleteRequest{Lease: c.Lease, Response: []byte("ok"), Now: at(3700), ExpiresAt: at(7300),
		Outbox: []outbox.Message{msg(dest, "A", "new")}}); err != nil {
		t.Fatalf("Complete again: %v", err)
	}
	// A store that replaced the old entry lets the new one be leased at
	// once; one that keeps both holds it behind the old, still leased.
	cur := lease(t, ob, dest, "r1", 3701, 7200)
	if len(cur) > 1 || len(cur) == 1 && string(cur[0].Body) != "new" {
		t.Fatalf("leased %+v, want at most the new entry", cur)
	}
	if err := ob.Dispatched(ctx(t), leases(old...), at(3702), at(9000)); err != nil && !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("Dispatched with the old entry's lease: %v", err)
	}
	p := entries(t, ob, dest, outbox.Pending)
	if len(p) != 1 || string(p[0].Body) != "new" {
		t.Fatalf("pending entries %+v, want the new one, unsent: the old entry's lease marked it", p)
	}
}

// outboxRequeue: Requeue on the Store's outbox. A Dead entry
// is put back to Pending once per listing, with its ID, in its place in
// its lane, and leased and sent again; an entry not Dead at the listed
// version is refused with outbox.ErrEntryChanged.
func (s *suite) outboxRequeue(t *testing.T, st dedup.Store, ob outbox.Store) {
	rq := ob
	dest := destination(t)
	k := send(t, st, 1, msg(dest, "A", "refused once"), msg(dest, "A", "fine"))
	got := lease(t, ob, dest, "r1", 1, 100)
	sameIDs(t, "lease", got, outbox.ID(k, 0), outbox.ID(k, 1))
	if err := ob.Dead(ctx(t), got[0].Lease, "no such queue", at(2), at(3600)); err != nil {
		t.Fatalf("Dead: %v", err)
	}
	if err := ob.Dispatched(ctx(t), leases(got[1]), at(2), at(3600)); err != nil {
		t.Fatalf("Dispatched: %v", err)
	}
	dead := entries(t, ob, dest, outbox.Dead)
	if len(dead) != 1 {
		t.Fatalf("dead entries %q, want 1", entryIDs(dead))
	}
	stale := dead[0]
	stale.Lease.Version--
	if err := rq.Requeue(ctx(t), stale, "x", at(3)); !errors.Is(err, outbox.ErrEntryChanged) {
		t.Fatalf("Requeue at a stale version: %v, want outbox.ErrEntryChanged", err)
	}
	if err := rq.Requeue(ctx(t), got[1], "x", at(3)); !errors.Is(err, outbox.ErrEntryChanged) {
		t.Fatalf("Requeue of a Dispatched entry: %v, want outbox.ErrEntryChanged", err)
	}
	if err := rq.Requeue(ctx(t), dead[0], "the queue exists now", at(3)); err != nil {
		t.Fatalf("Requeue of a Dead entry: %v", err)
	}
	if err := rq.Requeue(ctx(t), dead[0], "again", at(3)); !errors.Is(err, outbox.ErrEntryChanged) {
		t.Fatalf("Requeue of the same listing twice: %v, want outbox.ErrEntryChanged", err)
	}
	pending := entries(t, ob, dest, outbox.Pending)
	if len(pending) != 1 || pending[0].ID != dead[0].ID || pending[0].Seq != dead[0].Seq || pending[0].Attempts != 0 || pending[0].LastError != "the queue exists now" {
		t.Fatalf("pending entries after Requeue %+v, want the dead one with its ID and Seq, no attempts, the reason kept", pending)
	}
	k2 := send(t, st, 4, msg(dest, "A", "later"))
	again := lease(t, ob, dest, "r2", 4, 100)
	sameIDs(t, "lease after Requeue", again, dead[0].ID, outbox.ID(k2, 0))
	if again[0].ID != dead[0].ID || string(again[0].Body) != "refused once" {
		t.Fatalf("lease after Requeue: %q first, want the requeued entry ahead of its lane", again[0].ID)
	}
	if err := ob.Dispatched(ctx(t), leases(again...), at(5), at(3600)); err != nil {
		t.Fatalf("Dispatched of the requeued entry: %v", err)
	}
	if n := len(entries(t, ob, dest, outbox.Dispatched)); n != 3 {
		t.Fatalf("%d entries dispatched, want 3", n)
	}
}
