package dedup

import (
	"context"
	"log/slog"
	"time"

	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/retry"
)

// Status is the state of a record.
type Status string

// The record states.
const (
	StatusPending   Status = "PENDING"
	StatusCompleted Status = "COMPLETED"
	StatusFailed    Status = "FAILED"
	// StatusDeadLetter is a message judged poison whose dead-letter copy
	// no destination took: kept here, with its reason, as the dead letter
	// of last resort. Its handler never runs again while the record lives.
	StatusDeadLetter Status = "DEAD_LETTER"
)

// Record is the stored state of one key.
type Record struct {
	Key string
	// KeyHash is KeyHash(Key), set only where Key is "": by a store
	// that keeps a key's SHA-256 instead of the key (Redis), when it lists
	// or finds records, so that a tool can still name each one.
	KeyHash     string
	Status      Status
	Version     int64  // increases by one on every transition of the key
	Owner       string // token of the claim that wrote PENDING
	PayloadHash string // hash of the body that claimed the key
	Response    []byte // cached for duplicates (COMPLETED)
	// Attempts counts the handler runs that failed (a Fail without
	// RefundAttempt) since the key was last absent, COMPLETED or reset. A
	// claim never counts: not a takeover of an abandoned lease, not an
	// outage, not a record past its retention.
	Attempts  int
	LastError string // reason of the last Fail
	CreatedAt time.Time
	ExpiresAt time.Time // lease, retention or retry delay, by status
	// Takeovers counts the claims that took over an abandoned lease (an
	// expired PENDING record: its handler ended its process or ran past
	// its lease) since the key was last absent, COMPLETED past its
	// retention, or reset. Apart from Attempts: a failed run adds none, a
	// re-claim of a FAILED record adds none, and neither Fail nor Complete
	// resets it (a COMPLETED record keeps the count its run needed); a Fail
	// with ResetAttempts starts it afresh. A Store that deletes expired
	// records forgets it with the record.
	Takeovers int
}

// Live reports whether the record still counts at now: until and including
// ExpiresAt. An expired record is treated as absent even when still stored.
func (r Record) Live(now time.Time) bool { return !now.After(r.ExpiresAt) }

// ClaimableAt is the first instant at which every Store surely lets a
// record expiring at expiresAt be claimed again: a Store may keep expiries
// in whole seconds rounded up and compare a claim's Now in whole seconds
// rounded down (DynamoDB does), so a key is free from the whole second
// after its rounded expiry. A retry scheduled for then finds it claimable
// at its first delivery.
func ClaimableAt(expiresAt time.Time) time.Time {
	t := expiresAt.Truncate(time.Second)
	if !t.Equal(expiresAt) {
		t = t.Add(time.Second)
	}
	return t.Add(time.Second)
}

// Lease is the fencing token of a successful claim.
type Lease struct {
	Key     string
	Owner   string
	Version int64
}

// ClaimRequest asks to take a key.
type ClaimRequest struct {
	Key         string
	PayloadHash string
	Owner       string
	Now         time.Time
	LeaseUntil  time.Time // ExpiresAt of the PENDING record
	// SkewMargin is how far the clocks of workers may disagree: a record
	// is claimable only once Now is past its ExpiresAt by more than the
	// margin, so a claimer whose clock runs ahead cannot take a live lease.
	SkewMargin time.Duration
}

// Claim is the answer to a ClaimRequest.
type Claim struct {
	// Acquired is true when the caller now holds the lease.
	Acquired bool
	// Lease fences the caller's later calls (when Acquired).
	Lease Lease
	// Attempt numbers the handler run this claim allows: the record's
	// failed runs plus one. 1 for a fresh key and for an expired COMPLETED
	// record taken over (a new message); a takeover of an abandoned lease
	// keeps the count it found (when Acquired).
	Attempt int
	// Previous is the expired-but-present record taken over, if any (when
	// Acquired). Seeing one means TTL had not yet removed it.
	Previous *Record
	// Existing is the live record that won (when not Acquired).
	Existing Record
	// Archived (with Existing COMPLETED, no Response) says the key had
	// completed before and its record was since removed (by TTL): a Store
	// that keeps an archive of removed completions found it there. The
	// message is a duplicate whose response is no longer kept.
	Archived bool
	// Takeovers is the record's takeover count as this claim wrote it
	// (when Acquired): one more than the record had when this claim took
	// over an abandoned lease, so that the caller can decide, before it
	// runs the handler again, that the message keeps ending the process
	// that runs it. 0 for a fresh key and for an expired COMPLETED record
	// taken over (a new message).
	Takeovers int
}

// CompleteRequest moves a held lease to COMPLETED.
type CompleteRequest struct {
	Lease     Lease
	Response  []byte
	Now       time.Time
	ExpiresAt time.Time // retention
	// Writes are business writes committed atomically with the transition.
	// Their type is the Store's own, of the kind its Capabilities.Writes
	// declares; a Store that does not understand one returns
	// ErrUnsupportedWrite.
	Writes []Write
	// Outbox are messages to send onward, committed as outbox entries in
	// the same atomic commit (see package outbox). A Store whose
	// Capabilities give no Outbox returns ErrUnsupportedWrite for any.
	Outbox []outbox.Message
}

// FailRequest moves a held lease to FAILED.
type FailRequest struct {
	Lease   Lease
	Reason  string
	Now     time.Time
	RetryAt time.Time // ExpiresAt of the FAILED record
	// ResetAttempts starts the attempt and takeover counts afresh, used
	// when the message is dead-lettered so that a redrive from the DLQ gets
	// a full budget.
	ResetAttempts bool
	// RefundAttempt records the failure without counting it: the handler
	// did not fail, the infrastructure did (the store could not record its
	// result, the worker stopped), so the message's attempts are not spent.
	// Without it (and without ResetAttempts) Fail adds one to Attempts.
	RefundAttempt bool
	// DeadLetter keeps the record as StatusDeadLetter until RetryAt
	// instead of FAILED: the message's dead-letter copy could not be sent.
	DeadLetter bool
}

// ExtendRequest pushes a held lease's expiry out (a heartbeat). A lease
// only moves forward: a LeaseUntil earlier than the stored expiry (a clock
// stepped back) leaves the expiry as it is and is not an error.
type ExtendRequest struct {
	Lease      Lease
	Now        time.Time
	LeaseUntil time.Time
}

// Store keeps records. Implementations must be safe for concurrent use,
// hand over an Inspector (what an operator's tool reads through) in their
// Capabilities, and pass storetest.Run.
//
// Throttles: a Store that retries throttled calls itself must tell the
// observers it was handed (Runtime.Observe; keep them in a
// retry.Observers) of each one, as retry.Policy.Do does when given the
// observer. The consumer adapts its concurrency to these signals; a Store
// that hides them is never slowed.
//
// Errors are classified by retry.Classify: a configuration fault (a missing
// table, denied access) must classify as retry.Misconfigured, an outage as
// retry.Transient or retry.Throttled. Error texts must not carry keys, which
// may hold personal data: use KeyHash.
type Store interface {
	// Check verifies, before the first claim, that the Store can work: its
	// table exists with the expected layout and can be read. An error is a
	// configuration fault (the consumer does not start); a Store may log a
	// warning for what works but is unwise (TTL off, say).
	Check(ctx context.Context) error
	// Claim takes the key when it is absent or expired, in one conditional
	// write; otherwise it returns the live record without taking it.
	Claim(ctx context.Context, req ClaimRequest) (Claim, error)
	// Complete marks the lease COMPLETED, with its Writes in the same
	// atomic commit. ErrLeaseLost when the lease is no longer held; a
	// *BusinessConditionError when a write's own condition failed; a
	// *ResponseTooLargeError for a response over the Store's limit (see
	// DefaultMaxResponseSize); a *NilWriteError for a nil write. Nothing is
	// committed then, and the lease is still held.
	Complete(ctx context.Context, req CompleteRequest) error
	// Fail marks the lease FAILED. ErrLeaseLost when no longer held. Any
	// reason is stored, as StorableReason makes it: a Fail never fails for
	// its reason, so that a failed run is always counted.
	Fail(ctx context.Context, req FailRequest) error
	// Extend renews the lease. ErrLeaseLost when no longer held.
	Extend(ctx context.Context, req ExtendRequest) error
	// Get reads a record with strong consistency, expired or not.
	// ErrNotFound when absent.
	Get(ctx context.Context, key string) (Record, error)
	// ClaimComplete is the one-round-trip claim, for handlers whose whole
	// effect is their Writes: it commits the COMPLETED record and Writes
	// when the key is absent or expired. When it is live, nothing is
	// written and the Claim carries the existing record (Acquired false). A
	// business write's condition failing gives a *BusinessConditionError;
	// a response or a write Complete refuses is refused alike. A
	// Store whose Capabilities say no ClaimComplete returns
	// errors.ErrUnsupported.
	ClaimComplete(ctx context.Context, req ClaimCompleteRequest) (Claim, error)
	// Capabilities declares what the Store supports and hands over its
	// views (the relay's Outbox, batch mode's Offsets, the operator's
	// Inspector). It is a method of
	// every Store rather than a set of optional interfaces, so that a
	// wrapper embedding a Store forwards it with the rest and keeps every
	// capability and view of the Store it wraps. A Guard
	// (consumer.NewGuard, consumer.New) calls it once, when it is built.
	Capabilities() Capabilities
	// Attach hands the Store what it needs from a Guard built over it (see
	// Runtime). Each Guard calls it once, when it is built, before its
	// first call; a method of every Store, for the reason Capabilities is.
	//
	// A Store used by several Guards is attached by each: it logs to the
	// last non-nil Logger handed over (unless it was given a logger of its
	// own),
	// and tells every Observe handed over of each failure it retries,
	// since a throttle is the Store's, met by every Guard over it. A
	// Store used with no Guard logs to its own logger or slog.Default()
	// and tells no one of its retries.
	Attach(rt Runtime)
}

// Runtime is what a Guard hands the Store it is built over, in one Attach
// call.
type Runtime struct {
	// Logger is the Guard's logger (consumer.WithLogger), for the Store to
	// log to unless it was given a logger of its own. Nil when the Guard
	// was given none: every onceq component then logs to slog.Default().
	Logger *slog.Logger
	// Observe is told of each failure the Store retries itself, with its
	// class (give it to retry.Policy.Do, or to retry.Observers.Add): a
	// Consumer lowers its concurrency on throttles. Nil for a Guard that
	// adapts to nothing (one used without a Consumer).
	Observe func(class retry.Class, err error)
}

// Capabilities is what a Store declares about itself, and the views it
// gives of itself: data only, read once. The zero value is a Store with
// no optional feature and no view, which takes no business writes.
//
// A view (Outbox, Offsets, Inspector) is a value of an interface of its
// own, over the Store's tables, for a reader other than the consumer: the
// outbox relay, batch mode, an operator's tool. A Store hands it over here rather than as a method
// to be found by a type assertion, so that every capability of a Store is
// read in one place (the consumer, outbox.NewRelay's caller, the batch
// Runner's caller and the onceq CLI all read it here), and so that a
// wrapper forwarding Capabilities (by embedding the Store, or by calling
// the Store behind, as the COMPLETED cache does) hands every view on
// without a method of its own for each: a wrapper cannot hide a view by
// forgetting to forward it. A view is declared and given in one field,
// so a Store cannot declare a feature whose view it does not give. A
// wrapper that must see a view's calls returns its own in its place.
type Capabilities struct {
	// ClaimComplete: ClaimComplete works, so the consumer's one-round-trip
	// mode (consumer.OneRoundTrip) can run over the Store.
	ClaimComplete bool
	// TenantKeyed: the Store's layout partitions records by the tenant
	// TenantKey puts in front of each key. A consumer over it needs a
	// tenant function, or every key would share its namespace's partition.
	TenantKeyed bool
	// Writes is the kind of business write Complete and ClaimComplete take
	// (CompleteRequest.Writes): a Write whose WriteKind is another is
	// refused by a Guard before calling the Store, as a fault of the
	// deployment (a handler written for another Store), never of the
	// message. Empty: the Store commits no business writes.
	Writes WriteKind
	// Outbox is the relay's view of the Store's outbox (give it to
	// outbox.NewRelay): non-nil, Complete and ClaimComplete commit
	// outgoing messages with COMPLETED (CompleteRequest.Outbox). Nil: the
	// Store commits none, and a Guard over it refuses, at start, a
	// handler that is to send onward (consumer.SendsOnward).
	Outbox outbox.Store
	// Offsets is the batch view of the Store (give it to batch.NewRunner):
	// non-nil, the Store keeps Kafka partitions' offset rows for batch
	// mode, committed with its records. Nil: the Store has no batch mode.
	Offsets Offsets
	// Inspector is the operator's view of the Store (the onceq CLI reads
	// every Store through it). Not optional: every Store gives one, and
	// storetest.Run fails a Store whose Capabilities give none.
	Inspector Inspector
	// Resetter and Forgetter are the operator's two writes to a record
	// (onceq redrive resets a message that failed for good; onceq
	// console forgets a record). Not optional, as Inspector.
	Resetter  Resetter
	Forgetter Forgetter
}

// ClaimCompleteRequest is the one-round-trip claim: the record is written
// straight as COMPLETED together with Writes, if the key is claimable.
type ClaimCompleteRequest struct {
	Key         string
	PayloadHash string
	Owner       string
	Response    []byte
	Now         time.Time
	ExpiresAt   time.Time
	Writes      []Write
	// SkewMargin is as in ClaimRequest.
	SkewMargin time.Duration
	// Outbox is as in CompleteRequest.
	Outbox []outbox.Message
}
