package batch_test

import (
	"context"
	"errors"
	"sync"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/dedup"
)

// rowStore is a batch.Store kept in memory for the Runner's tests: the
// offset rows with their tokens, the committed writes, and completed
// keys. maxItems, when set, refuses bigger commits as DynamoDB does;
// failNext fails that many commits with a transient error.
type rowStore struct {
	mu       sync.Mutex
	rows     map[batch.Partition]batch.Lease
	writes   []dedup.Write
	keys     map[string]bool
	commits  []batch.Commit
	maxItems int
	failNext int
	// loseAnswer commits the next commit but answers it with an error.
	loseAnswer bool
}

func newRowStore() *rowStore {
	return &rowStore{rows: map[batch.Partition]batch.Lease{}, keys: map[string]bool{}}
}

var errTransient = errors.New("store unavailable")

func (s *rowStore) Acquire(_ context.Context, p batch.Partition, member string) (batch.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.rows[p]
	if !ok {
		l = batch.Lease{Partition: p, Next: -1}
	}
	l.Token++
	l.Member = member
	s.rows[p] = l
	return l, nil
}

func (s *rowStore) Commit(_ context.Context, c batch.Commit) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := c.Check(); err != nil {
		return err
	}
	if s.failNext > 0 {
		s.failNext--
		return errTransient
	}
	if s.loseAnswer {
		// Commit, and lose the answer.
		s.loseAnswer = false
		s.mu.Unlock()
		err := s.Commit(context.Background(), c)
		s.mu.Lock()
		if err != nil {
			return err
		}
		return errTransient
	}
	row := s.rows[c.Lease.Partition]
	if row.Token != c.Lease.Token {
		return batch.ErrFenced
	}
	if row.Next != -1 && row.Next != c.From {
		return batch.ErrOffsetMismatch
	}
	if n := len(c.Writes) + len(c.Keys) + 1; s.maxItems > 0 && n > s.maxItems {
		return &batch.TooLargeError{Items: n, Max: s.maxItems}
	}
	var dup []int
	for i, k := range c.Keys {
		if s.keys[k] {
			dup = append(dup, i)
		}
	}
	if len(dup) > 0 {
		return &batch.DuplicateKeysError{Indexes: dup}
	}
	for _, k := range c.Keys {
		s.keys[k] = true
	}
	s.writes = append(s.writes, c.Writes...)
	row.Next = c.Next
	s.rows[c.Lease.Partition] = row
	s.commits = append(s.commits, c)
	return nil
}

func (s *rowStore) Offset(_ context.Context, p batch.Partition) (batch.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.rows[p]
	if !ok {
		return batch.Lease{}, batch.ErrNotFound
	}
	return l, nil
}

func (s *rowStore) written() []dedup.Write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]dedup.Write(nil), s.writes...)
}

func (s *rowStore) committed() []batch.Commit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]batch.Commit(nil), s.commits...)
}
