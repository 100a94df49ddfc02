// Package batch gives exactly-once effects to Kafka consumers for one store
// write per batch instead of one per message.
//
// A Kafka partition's offsets are a total order. In batch mode a handler
// receives the records of one partition, in order, and returns the
// batch's business writes; the Store commits them together with the
// partition's offset row (group, topic, partition, next offset, fencing
// token) in one transaction. The Store is the truth: on assignment a
// partition resumes from the stored offset, and the group's own commit
// follows it for lag tools only. A member that has lost a partition
// cannot commit for it, since the offset row's condition checks the token
// it took on assignment.
package batch

import "github.com/onceq/onceq/dedup"

// The offset rows' contract is declared in package dedup, beside the
// Store that implements it and hands it over (dedup.Capabilities.Offsets);
// batch mode names it here under its own names, which are the same types.
type (
	// Partition names one Kafka partition consumed by one group: Group,
	// Topic and Partition.
	Partition = dedup.Partition
	// Lease is a member's hold on a partition's offset row, taken on
	// assignment (see dedup.OffsetLease): its Partition, the Member that
	// holds it, the fencing Token, and Next, the offset to read from.
	Lease = dedup.OffsetLease
	// Commit is one batch's commit, in one transaction (see
	// dedup.OffsetCommit): under Lease, the records From its first offset
	// to Next, their business Writes, their Keys (and PayloadHashes)
	// recorded COMPLETED, at Now, expiring at ExpiresAt.
	Commit = dedup.OffsetCommit
	// Store keeps partitions' offset rows: a dedup.Store's batch view,
	// handed over in its Capabilities.Offsets (see dedup.Offsets). Acquire
	// takes a partition's row on assignment, Commit commits a batch with
	// it, Offset reads it.
	Store = dedup.Offsets
	// DuplicateKeysError is a commit refused because records' keys were
	// already COMPLETED, or repeated within the commit: Indexes are their
	// places in Commit.Keys.
	DuplicateKeysError = dedup.DuplicateKeysError
	// TooLargeError is a commit over what the Store can write in one
	// transaction (see dedup.CommitTooLargeError): Items it needed, Max
	// it may.
	TooLargeError = dedup.CommitTooLargeError
)

var (
	// ErrFenced is a commit by a member whose partition has since been
	// taken by another member (a zombie): nothing was committed.
	ErrFenced = dedup.ErrFenced
	// ErrNotFound is a partition with no offset row (dedup.ErrNoOffset).
	ErrNotFound = dedup.ErrNoOffset
	// ErrOffsetMismatch is a commit whose From is not the stored next
	// offset: nothing was committed.
	ErrOffsetMismatch = dedup.ErrOffsetMismatch
	// ErrInvalidCommit is a commit no Store can take (see Commit.Check).
	ErrInvalidCommit = dedup.ErrInvalidCommit
)
