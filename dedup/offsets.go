package dedup

// The offset rows of batch mode. Package batch runs them and names them
// under its own names (batch.Store, batch.Partition, batch.Lease,
// batch.Commit); they are declared here, beside the Store, because a
// Store hands its batch view over in Capabilities.Offsets and implements
// it over its own tables, with no import of the runner above it. Their
// error texts begin "batch:", the mode they belong to.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Partition names one Kafka partition consumed by one group.
type Partition struct {
	Group     string
	Topic     string
	Partition int32
}

func (p Partition) String() string {
	return fmt.Sprintf("%s/%s/%d", p.Group, p.Topic, p.Partition)
}

// OffsetLease is a member's hold on a partition's offset row, taken on
// assignment.
type OffsetLease struct {
	Partition Partition
	// Member is the group member that took it, for operators.
	Member string
	// Token fences commits: Acquire raises it, and a commit whose token is
	// not the stored one is refused with ErrFenced.
	Token int64
	// Next is the stored next offset to consume; -1 when the partition has
	// no row yet (start where the group's commit or reset policy says).
	Next int64
}

// OffsetCommit is one batch's commit: its writes and the partition's new next
// offset, in one transaction.
type OffsetCommit struct {
	Lease OffsetLease
	// From is the offset the batch starts at: the stored next offset must
	// equal it (or the row be absent when Lease.Next is -1), so a batch is
	// never committed twice or with a gap.
	From int64
	// Next is the offset after the batch's last record.
	Next int64
	// Writes are the batch's business writes, of the Store's own types, of
	// the kind its Capabilities.Writes declares.
	Writes []Write
	// Keys, when not empty, are per-record idempotency keys claimed as
	// COMPLETED in the same transaction (producer duplicates: one business
	// message produced twice at two offsets). A key already COMPLETED
	// fails the commit with a *DuplicateKeysError naming its index, and
	// nothing is committed.
	Keys []string
	Now  time.Time
	// ExpiresAt is the retention of the claimed Keys.
	ExpiresAt time.Time
	// PayloadHashes, when not empty, hold one hash per key, of its
	// record's body as a per-message consumer hashes it (its
	// PayloadHashFunc, by default PayloadHash), stored with the
	// key's record: a per-message consumer that meets the key then takes
	// its message for a duplicate, not for a reuse of the key with
	// another payload. Empty: the records hold no hash.
	PayloadHashes []string
}

// Offsets is a Store's batch view: the offset rows of Kafka partitions
// consumed in batch mode (package batch, which names it batch.Store),
// over the same tables as the Store's records, so that a batch's Keys are
// the records that Store keeps. A Store hands it over in
// Capabilities.Offsets.
type Offsets interface {
	// Acquire takes the partition's offset row for member on assignment:
	// it raises the row's token (creating the row if absent, with Next -1)
	// and returns the new Lease.
	Acquire(ctx context.Context, p Partition, member string) (OffsetLease, error)
	// Commit writes the batch's Writes, Keys and the new next offset in
	// one transaction, if the stored token is the Lease's and the stored
	// next offset is From (or the row's Next is -1). ErrFenced when the
	// token moved (another member took the partition); ErrOffsetMismatch
	// when the stored next offset is not From; a *DuplicateKeysError for
	// Keys already live; a *BusinessConditionError when a write's
	// own condition failed; a *CommitTooLargeError over the Store's bound;
	// ErrInvalidCommit for what OffsetCommit.Check refuses. Nothing is
	// committed on any error.
	Commit(ctx context.Context, c OffsetCommit) error
	// Offset reads a partition's stored row (Token and Next); ErrNoOffset
	// when absent.
	Offset(ctx context.Context, p Partition) (OffsetLease, error)
}

// ErrFenced is a commit by a member whose partition has since been taken
// by another member (a zombie): nothing was committed.
var ErrFenced = errors.New("batch: the partition's offset row was taken by another member")

// ErrNoOffset is a partition with no offset row.
var ErrNoOffset = errors.New("batch: no offset row for the partition")

// ErrOffsetMismatch is a commit whose From is not the stored next offset
// (a batch committed twice, or one that would leave a gap): nothing was
// committed. The caller's view of the partition is stale; it resumes from
// the stored offset (Offset).
var ErrOffsetMismatch = errors.New("batch: the commit does not start at the stored next offset")

// ErrInvalidCommit is a commit no Store can take (see OffsetCommit.Check).
// Nothing was committed.
var ErrInvalidCommit = errors.New("batch: invalid commit")

// DuplicateKeysError is a commit refused because records' keys were
// already COMPLETED (or live in any state), or repeated within the commit.
type DuplicateKeysError struct {
	// Indexes are the positions in OffsetCommit.Keys already completed, in
	// increasing order; for a key repeated within Keys, every occurrence
	// after the first.
	Indexes []int
}

func (e *DuplicateKeysError) Error() string {
	return fmt.Sprintf("batch: %d record keys already completed", len(e.Indexes))
}

// CommitTooLargeError is a commit over what the Store can write in one
// transaction (DynamoDB: 100 items, the offset row included). Nothing was
// committed; the caller splits the batch at record boundaries and commits
// each part with its own offset.
type CommitTooLargeError struct {
	// Items is how many items the commit needed; Max how many fit.
	Items, Max int
}

func (e *CommitTooLargeError) Error() string {
	return fmt.Sprintf("batch: the commit needs %d items, the store takes at most %d in one transaction", e.Items, e.Max)
}

// Check reports, before any store call, what makes c a commit no Store
// can take: an error wrapping ErrInvalidCommit for a negative From, a
// Next before From, an empty key, Keys that would expire at once
// (ExpiresAt not after Now), or PayloadHashes not one per key; a *DuplicateKeysError for a key that Keys
// hold more than once, naming every occurrence after the first. Every
// Store's Commit runs it first, so that a repeat within a batch is named
// before the keys already stored are.
func (c OffsetCommit) Check() error {
	switch {
	case c.From < 0:
		return fmt.Errorf("%w: %s from offset %d", ErrInvalidCommit, c.Lease.Partition, c.From)
	case c.Next < c.From:
		return fmt.Errorf("%w: %s next offset %d before the batch's first %d", ErrInvalidCommit, c.Lease.Partition, c.Next, c.From)
	}
	if len(c.Keys) == 0 {
		if len(c.PayloadHashes) != 0 {
			return fmt.Errorf("%w: %s payload hashes without keys", ErrInvalidCommit, c.Lease.Partition)
		}
		return nil
	}
	if len(c.PayloadHashes) != 0 && len(c.PayloadHashes) != len(c.Keys) {
		return fmt.Errorf("%w: %s %d payload hashes for %d keys", ErrInvalidCommit, c.Lease.Partition, len(c.PayloadHashes), len(c.Keys))
	}
	if !c.ExpiresAt.After(c.Now) {
		return fmt.Errorf("%w: %s keys expire at %v, not after the commit's time %v", ErrInvalidCommit, c.Lease.Partition, c.ExpiresAt, c.Now)
	}
	seen := make(map[string]struct{}, len(c.Keys))
	var dup []int
	for i, k := range c.Keys {
		if k == "" {
			return fmt.Errorf("%w: %s key %d is empty", ErrInvalidCommit, c.Lease.Partition, i)
		}
		if _, ok := seen[k]; ok {
			dup = append(dup, i)
			continue
		}
		seen[k] = struct{}{}
	}
	if dup != nil {
		return &DuplicateKeysError{Indexes: dup}
	}
	return nil
}

// PayloadHash is the payload hash of Keys[i]: PayloadHashes[i], or ""
// when the commit gives none.
func (c OffsetCommit) PayloadHash(i int) string {
	if len(c.PayloadHashes) == 0 {
		return ""
	}
	return c.PayloadHashes[i]
}
