package dedup

import (
	"context"
	"errors"
	"time"
)

// Resetter is the one write an operator's tool makes to a record: it
// makes a message that failed for good run again (a redrive from its
// dead-letter destination). Every Store implements it, as it does
// Inspector.
type Resetter interface {
	// Reset makes the record of req.Key, as read at req.Version, claimable
	// from req.Now with a full budget: FAILED, with no attempts and no
	// takeovers counted, req.Reason as its LastError, expiring at req.Now,
	// one version on (so that a second Reset from the same reading is
	// refused). It takes only a record Resettable at req.Now; any other
	// (absent, COMPLETED, a live lease, another version) is refused with
	// an error wrapping ErrRecordChanged, and nothing is written.
	Reset(ctx context.Context, req ResetRequest) error
}

// ResetRequest asks Resetter.Reset to reset the record of Key read at
// Version.
type ResetRequest struct {
	Key     string
	Version int64
	// Reason says why, kept as the record's LastError (as StorableReason
	// makes it).
	Reason string
	Now    time.Time
}

// ErrRecordChanged is a conditional change refused because the record is
// no longer as it was read: read it again and decide anew.
var ErrRecordChanged = errors.New("dedup: the record changed since it was read")

// Resettable reports whether Reset takes r at now: a message that failed
// (FAILED, DEAD_LETTER) or whose lease was abandoned (PENDING past its
// expiry). A COMPLETED record never is: its effect committed, and running
// the message again would do it twice.
func Resettable(r Record, now time.Time) bool {
	switch r.Status {
	case StatusFailed, StatusDeadLetter:
		return true
	case StatusPending:
		return !r.Live(now)
	}
	return false
}
