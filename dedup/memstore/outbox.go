package memstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/outbox"
)

// outboxLog holds the outbox entries: every entry in commit order (so in
// Seq order per lane), and per lane its Pending entries, which a relay
// leases from the front. Locked after a commit's shard, never before.
type outboxLog struct {
	mu   sync.Mutex
	all  []*outbox.Entry // in commit order
	byID map[string]*outbox.Entry
	// ord numbers each entry of all in commit order (from added), so
	// that a page of EntriesPage resumes after the last one listed.
	ord   map[*outbox.Entry]int64
	added int64
	lanes map[lane]*laneLog // every lane with an entry stored
	// queued is the lanes with Pending entries, which Lease looks at.
	queued map[lane]*laneLog
}

// lane is a Destination and OrderingKey, along which order is kept.
type lane struct{ destination, orderingKey string }

type laneLog struct {
	seq     int64           // the last Seq given
	stored  int             // entries of the lane stored, in any state
	pending []*outbox.Entry // in Seq order
}

// add keeps msgs as the Pending entries of the input whose lease key
// is key, committed at now. It runs under the commit's locks, after every
// check has passed, so that the entries exist exactly when COMPLETED
// does. An entry whose ID is stored already (the key completed once more
// after its record's retention) replaces it: the consumer downstream
// takes both for one message anyway.
func (o *outboxLog) add(key string, msgs []outbox.Message, now time.Time) {
	if len(msgs) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byID == nil {
		o.byID, o.lanes, o.queued = map[string]*outbox.Entry{}, map[lane]*laneLog{}, map[lane]*laneLog{}
		o.ord = map[*outbox.Entry]int64{}
	}
	for i, m := range msgs {
		id := outbox.ID(key, i)
		var version int64
		if old := o.byID[id]; old != nil {
			// On a later version, so that a lease of the old entry,
			// whoever holds it, is fenced from the new one.
			version = old.Lease.Version + 1
			o.removeLocked(old)
		}
		l := lane{m.Destination, m.OrderingKey}
		ll := o.lanes[l]
		if ll == nil {
			ll = &laneLog{}
			o.lanes[l] = ll
		}
		ll.seq++
		ll.stored++
		o.queued[l] = ll
		m.Body, m.Headers = slices.Clone(m.Body), maps.Clone(m.Headers)
		e := &outbox.Entry{Message: m, ID: id, Seq: ll.seq, State: outbox.Pending, CreatedAt: now}
		if version > 0 {
			e.Lease = outbox.Lease{ID: id, Version: version}
		}
		ll.pending = append(ll.pending, e)
		o.all = append(o.all, e)
		o.added++
		o.ord[e] = o.added
		o.byID[id] = e
	}
}

// removeLocked forgets e.
func (o *outboxLog) removeLocked(e *outbox.Entry) {
	delete(o.byID, e.ID)
	delete(o.ord, e)
	o.all = slices.DeleteFunc(o.all, func(x *outbox.Entry) bool { return x == e })
	o.unqueueLocked(e)
	o.forgetLocked(e)
}

// forgetLocked counts e out of its lane, and forgets a lane left with no
// entry: only then may its Seq start again, so that it never repeats
// among the entries stored.
func (o *outboxLog) forgetLocked(e *outbox.Entry) {
	l := lane{e.Destination, e.OrderingKey}
	if ll := o.lanes[l]; ll != nil {
		if ll.stored--; ll.stored == 0 {
			delete(o.lanes, l)
		}
	}
}

// unqueueLocked takes e out of its lane's Pending entries.
func (o *outboxLog) unqueueLocked(e *outbox.Entry) {
	l := lane{e.Destination, e.OrderingKey}
	ll := o.queued[l]
	if ll == nil {
		return
	}
	ll.pending = slices.DeleteFunc(ll.pending, func(x *outbox.Entry) bool { return x == e })
	if len(ll.pending) == 0 {
		delete(o.queued, l)
	}
}

// unqueueDoneLocked takes lane l's entries no longer Pending out of its
// Pending entries.
func (o *outboxLog) unqueueDoneLocked(l lane) {
	ll := o.queued[l]
	if ll == nil {
		return
	}
	ll.pending = slices.DeleteFunc(ll.pending, func(x *outbox.Entry) bool { return x.State != outbox.Pending })
	if len(ll.pending) == 0 {
		delete(o.queued, l)
	}
}

// sweep forgets the Dispatched and Dead entries whose retention ended
// before now, and returns how many.
func (o *outboxLog) sweep(now time.Time) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	o.all = slices.DeleteFunc(o.all, func(e *outbox.Entry) bool {
		if e.State == outbox.Pending || !now.After(e.ExpiresAt) {
			return false
		}
		delete(o.byID, e.ID)
		delete(o.ord, e)
		o.forgetLocked(e)
		n++
		return true
	})
	return n
}

// Outbox returns the relay's view of the Store's outbox entries, which
// Complete and ClaimComplete commit with COMPLETED (see package outbox),
// and which its Capabilities hand over (dedup.Capabilities.Outbox).
// Sweep forgets the entries dispatched or dead past their retention.
func (s *Store) Outbox() outbox.Store { return (*outboxView)(s) }

// outboxView is the Store seen as an outbox.Store.
type outboxView Store

// Check implements outbox.Store: an outbox in memory has no table to
// miss.
func (*outboxView) Check(context.Context) error { return nil }

// Lease implements outbox.Store: per lane, the longest run of free
// Pending entries from the lane's front, up to Max in all. An entry held
// by a relay, or given back for a retry later, blocks the entries behind
// it in its lane; entries with no OrderingKey keep no order and block
// none.
func (v *outboxView) Lease(_ context.Context, req outbox.LeaseRequest) ([]outbox.Entry, error) {
	o := &v.outbox
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]outbox.Entry, 0, min(req.Max, len(o.queued)))
	for l, ll := range o.queued {
		for _, e := range ll.pending {
			if len(out) >= req.Max {
				return out, nil
			}
			if req.Now.Before(e.ExpiresAt) {
				if l.orderingKey != "" {
					break // held, or to be retried later: the lane waits
				}
				continue
			}
			e.Lease = outbox.Lease{ID: e.ID, Owner: req.Owner, Version: e.Lease.Version + 1}
			e.ExpiresAt = req.LeaseUntil
			out = append(out, *e)
		}
	}
	return out, nil
}

// fencedLocked returns the Pending entry l still holds, or an error
// wrapping outbox.ErrLeaseLost.
func (o *outboxLog) fencedLocked(l outbox.Lease) (*outbox.Entry, error) {
	e := o.byID[l.ID]
	if e == nil || e.State != outbox.Pending || e.Lease.Owner != l.Owner || e.Lease.Version != l.Version {
		return nil, fmt.Errorf("%w: entry %s version %d", outbox.ErrLeaseLost, dedup.KeyHash(l.ID), l.Version)
	}
	return e, nil
}

// Dispatched implements outbox.Store.
func (v *outboxView) Dispatched(_ context.Context, leases []outbox.Lease, _, retainUntil time.Time) error {
	o := &v.outbox
	o.mu.Lock()
	defer o.mu.Unlock()
	var errs []error
	var touched map[lane]struct{}
	for _, l := range leases {
		e, err := o.fencedLocked(l)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e.State, e.ExpiresAt = outbox.Dispatched, retainUntil
		ln := lane{e.Destination, e.OrderingKey}
		if o.popFrontLocked(ln, e) {
			continue
		}
		if touched == nil {
			touched = map[lane]struct{}{}
		}
		touched[ln] = struct{}{}
	}
	// The other lanes' Pending entries are filtered once each, not once
	// per entry: a lane with no OrderingKey may hold thousands.
	for l := range touched {
		o.unqueueDoneLocked(l)
	}
	return errors.Join(errs...)
}

// popFrontLocked takes e out of lane l's Pending entries when it is the
// first of them, the common case of a lane with an OrderingKey (leased
// from its front, in order), and reports whether it did. It costs one
// look-up where a filter of the lane costs a set of lanes to filter.
func (o *outboxLog) popFrontLocked(l lane, e *outbox.Entry) bool {
	if l.orderingKey == "" {
		return false
	}
	ll := o.queued[l]
	if ll == nil || len(ll.pending) == 0 || ll.pending[0] != e {
		return false
	}
	ll.pending[0] = nil
	ll.pending = ll.pending[1:]
	if len(ll.pending) == 0 {
		delete(o.queued, l)
	}
	return true
}

// Retry implements outbox.Store.
func (v *outboxView) Retry(_ context.Context, l outbox.Lease, reason string, _, retryAt time.Time) error {
	return v.outbox.withLease(l, func(e *outbox.Entry) {
		// A new version with no owner: the lease given back fences nothing.
		e.Lease = outbox.Lease{ID: e.ID, Version: e.Lease.Version + 1}
		e.Attempts++
		e.LastError, e.ExpiresAt = dedup.StorableReason(reason), retryAt
	})
}

// Release implements outbox.Store.
func (v *outboxView) Release(_ context.Context, l outbox.Lease, reason string, _, retryAt time.Time) error {
	return v.outbox.withLease(l, func(e *outbox.Entry) {
		e.Lease = outbox.Lease{ID: e.ID, Version: e.Lease.Version + 1}
		e.Releases++
		e.LastError, e.ExpiresAt = dedup.StorableReason(reason), retryAt
	})
}

// Dead implements outbox.Store.
func (v *outboxView) Dead(_ context.Context, l outbox.Lease, reason string, _, retainUntil time.Time) error {
	return v.outbox.withLease(l, func(e *outbox.Entry) {
		e.State, e.LastError, e.ExpiresAt = outbox.Dead, dedup.StorableReason(reason), retainUntil
		v.outbox.unqueueLocked(e)
	})
}

// withLease runs f on the entry l still holds, under the lock, or returns
// an error wrapping outbox.ErrLeaseLost.
func (o *outboxLog) withLease(l outbox.Lease, f func(e *outbox.Entry)) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, err := o.fencedLocked(l)
	if err != nil {
		return err
	}
	f(e)
	return nil
}

// Entries implements outbox.Store, in commit order; limit <= 0 lists all.
func (v *outboxView) Entries(_ context.Context, state outbox.State, limit int) ([]outbox.Entry, error) {
	o := &v.outbox
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []outbox.Entry
	for _, e := range o.all {
		if limit > 0 && len(out) >= limit {
			break
		}
		if state == "" || e.State == state {
			out = append(out, *e)
		}
	}
	return out, nil
}

// EntriesPage implements outbox.Pager: at most limit entries (all when
// limit <= 0) in commit order, from the one after the cursor's.
func (v *outboxView) EntriesPage(_ context.Context, state outbox.State, cursor string, limit int) ([]outbox.Entry, string, error) {
	after := int64(0)
	if cursor != "" {
		n, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || n <= 0 {
			return nil, "", fmt.Errorf("memstore: outbox entries: %w", outbox.ErrBadCursor)
		}
		after = n
	}
	o := &v.outbox
	o.mu.Lock()
	defer o.mu.Unlock()
	i, _ := slices.BinarySearchFunc(o.all, after+1, func(e *outbox.Entry, n int64) int { return cmp.Compare(o.ord[e], n) })
	var out []outbox.Entry
	for ; i < len(o.all); i++ {
		if limit > 0 && len(out) >= limit {
			return out, strconv.FormatInt(o.ord[o.all[i-1]], 10), nil
		}
		if e := o.all[i]; state == "" || e.State == state {
			out = append(out, *e)
		}
	}
	return out, "", nil
}

var _ outbox.Requeuer = (*outboxView)(nil)

// Requeue implements outbox.Requeuer.
func (v *outboxView) Requeue(_ context.Context, listed outbox.Entry, reason string, now time.Time) error {
	l := listed.Lease
	o := &v.outbox
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.byID[listed.ID]
	if e == nil || e.State != outbox.Dead || e.Lease.Version != l.Version {
		return fmt.Errorf("memstore: requeue: %w: entry %s version %d", outbox.ErrEntryChanged, dedup.KeyHash(l.ID), l.Version)
	}
	e.State, e.Lease = outbox.Pending, outbox.Lease{ID: e.ID, Version: e.Lease.Version + 1}
	e.Attempts, e.Releases, e.LastError, e.ExpiresAt = 0, 0, dedup.StorableReason(reason), now
	ln := lane{e.Destination, e.OrderingKey}
	ll := o.lanes[ln]
	i, _ := slices.BinarySearchFunc(ll.pending, e.Seq, func(x *outbox.Entry, seq int64) int { return cmp.Compare(x.Seq, seq) })
	ll.pending = slices.Insert(ll.pending, i, e)
	o.queued[ln] = ll
	return nil
}
