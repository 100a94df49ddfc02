package outbox_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/onceq/onceq/outbox"
)

// fakeStore is an outbox.Store in memory that keeps the Lease contract:
// an entry is returned only behind every earlier Pending entry of its
// lane, and each lease raises the entry's Version.
type fakeStore struct {
	mu      sync.Mutex
	seq     int64
	entries []*fakeEntry // in commit order
}

type fakeEntry struct {
	outbox.Entry
	retryAt time.Time
}

func (s *fakeStore) add(now time.Time, key string, msgs ...outbox.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range msgs {
		s.seq++
		id := outbox.ID(key, i)
		s.entries = append(s.entries, &fakeEntry{Entry: outbox.Entry{Message: m, ID: id, Seq: s.seq, State: outbox.Pending,
			Lease: outbox.Lease{ID: id}, CreatedAt: now}})
	}
}

func (s *fakeStore) Lease(_ context.Context, req outbox.LeaseRequest) ([]outbox.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	type lane struct{ dest, key string }
	blocked := map[lane]bool{}
	var out []outbox.Entry
	for _, e := range s.entries {
		if e.State != outbox.Pending {
			continue
		}
		l := lane{e.Destination, e.OrderingKey}
		free := !e.ExpiresAt.After(req.Now) && !e.retryAt.After(req.Now)
		if e.OrderingKey != "" && blocked[l] {
			continue
		}
		if !free || len(out) == req.Max {
			blocked[l] = true
			continue
		}
		e.Lease.Owner, e.Lease.Version, e.ExpiresAt = req.Owner, e.Lease.Version+1, req.LeaseUntil
		out = append(out, e.Entry)
	}
	return out, nil
}

// held finds the entry a lease still holds.
func (s *fakeStore) held(l outbox.Lease) (*fakeEntry, error) {
	for _, e := range s.entries {
		if e.ID == l.ID {
			if e.State != outbox.Pending || e.Lease != l {
				return nil, outbox.ErrLeaseLost
			}
			return e, nil
		}
	}
	return nil, outbox.ErrLeaseLost
}

func (s *fakeStore) Dispatched(_ context.Context, leases []outbox.Lease, now, retainUntil time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, l := range leases {
		e, err := s.held(l)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e.State, e.ExpiresAt = outbox.Dispatched, retainUntil
	}
	return errors.Join(errs...)
}

func (s *fakeStore) Retry(_ context.Context, l outbox.Lease, reason string, now, retryAt time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.held(l)
	if err != nil {
		return err
	}
	e.Attempts++
	e.LastError, e.ExpiresAt, e.retryAt = reason, now, retryAt
	return nil
}

func (s *fakeStore) Dead(_ context.Context, l outbox.Lease, reason string, now, retainUntil time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.held(l)
	if err != nil {
		return err
	}
	e.State, e.LastError, e.ExpiresAt = outbox.Dead, reason, retainUntil
	return nil
}

func (s *fakeStore) Entries(_ context.Context, state outbox.State, limit int) ([]outbox.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []outbox.Entry
	for _, e := range s.entries {
		if (state == "" || e.State == state) && len(out) < limit {
			out = append(out, e.Entry)
		}
	}
	return out, nil
}

// recordingSender records what it was sent, in each call, and fails as
// fail says.
type recordingSender struct {
	mu    sync.Mutex
	calls [][]outbox.Entry
	fail  func(e outbox.Entry, sent int) error // sent: earlier sends of e
	block chan struct{}                        // when set, Send waits for it
}

func (r *recordingSender) Send(ctx context.Context, entries []outbox.Entry) []error {
	if r.block != nil {
		select {
		case <-r.block:
		case <-ctx.Done():
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := make([]error, len(entries))
	for i, e := range entries {
		if r.fail != nil {
			errs[i] = r.fail(e, r.sentLocked(e.ID))
		}
	}
	r.calls = append(r.calls, slices.Clone(entries))
	return errs
}

func (r *recordingSender) sentLocked(id string) int {
	n := 0
	for _, c := range r.calls {
		for _, e := range c {
			if e.ID == id {
				n++
			}
		}
	}
	return n
}

// order returns the IDs sent, in order, with how often each was sent.
func (r *recordingSender) order() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for _, c := range r.calls {
		for _, e := range c {
			ids = append(ids, e.ID)
		}
	}
	return ids
}
