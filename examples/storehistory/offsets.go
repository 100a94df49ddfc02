package storehistory

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/dedup"
)

// The batch.Store operations recorded, keyed by the partition
// (batch.Partition.String).
const (
	OpAcquire = "acquire" // a member took the partition's offset row
	OpCommit  = "commit"  // a batch's commit of its next offset
	OpOffset  = "offset"  // a read of the offset row
)

// Offsets is a batch.Store that records every call on the Store it wraps,
// in the events of a Recorder: an Acquire's member (Owner) and the Token
// and Next it returned; a Commit's Token, From and Next and its outcome;
// an Offset read's Token and Next. A Commit refused as fenced or as a
// mismatch of offsets is a definite failure (Outcome fail, Refusal
// saying which); one whose own condition or size refused it is refused.
type Offsets struct {
	store batch.Store
	rec   *Recorder
}

// NewOffsets returns an Offsets over store appending to w, one Write of
// one line per event (give it an unbuffered file).
func NewOffsets(store batch.Store, w io.Writer) *Offsets {
	return &Offsets{store: store, rec: &Recorder{w: w, now: time.Now}}
}

// Err returns the first error writing the history, if any.
func (o *Offsets) Err() error { return o.rec.Err() }

// Acquire implements batch.Store.
func (o *Offsets) Acquire(ctx context.Context, p batch.Partition, member string) (batch.Lease, error) {
	done := o.rec.call(Event{Op: OpAcquire, Key: p.String(), Owner: member})
	l, err := o.store.Acquire(ctx, p, member)
	var ret Event
	if err == nil {
		ret.Token, ret.Next = l.Token, l.Next
	}
	done(ret, err)
	return l, err
}

// Commit implements batch.Store.
func (o *Offsets) Commit(ctx context.Context, c batch.Commit) error {
	done := o.rec.call(Event{Op: OpCommit, Key: c.Lease.Partition.String(), Owner: c.Lease.Member,
		Token: c.Lease.Token, From: c.From, Next: c.Next, Now: unix(c.Now)})
	err := o.store.Commit(ctx, c)
	ret := Event{Outcome: commitOutcome(err)}
	switch {
	case errors.Is(err, batch.ErrFenced):
		ret.Refusal = RefusalFenced
	case errors.Is(err, batch.ErrOffsetMismatch):
		ret.Refusal = RefusalMismatch
	}
	done(ret, err)
	return err
}

// Offset implements batch.Store. A partition with no row is a read of
// nothing (Outcome fail).
func (o *Offsets) Offset(ctx context.Context, p batch.Partition) (batch.Lease, error) {
	done := o.rec.call(Event{Op: OpOffset, Key: p.String()})
	l, err := o.store.Offset(ctx, p)
	var ret Event
	switch {
	case err == nil:
		ret.Token, ret.Next = l.Token, l.Next
	case errors.Is(err, batch.ErrNotFound):
		ret.Outcome = OutcomeFail
	}
	done(ret, err)
	return l, err
}

// The refusals of a Commit that failed for sure.
const (
	RefusalFenced   = "fenced"   // the stored token was not the lease's
	RefusalMismatch = "mismatch" // the stored next offset was not From
)

// commitOutcome classifies a Commit's error: each error by which a Store
// says it committed nothing is definite.
func commitOutcome(err error) string {
	var (
		dup   *batch.DuplicateKeysError
		large *batch.TooLargeError
		cond  *dedup.BusinessConditionError
	)
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, batch.ErrFenced), errors.Is(err, batch.ErrOffsetMismatch):
		return OutcomeFail
	case errors.As(err, &dup), errors.As(err, &large), errors.As(err, &cond), errors.Is(err, batch.ErrInvalidCommit):
		return OutcomeRefused
	default:
		return OutcomeUnknown
	}
}

var _ batch.Store = (*Offsets)(nil)
