// Package storehistory records a history of a dedup.Store: every call a
// consumer makes on it, with its arguments, its outcome and the wall-clock
// times of its call and return, and every message the consumer settled.
// One JSON line per event is appended to a writer, written before the call
// (so that a call cut short by a killed process still shows) and after it.
//
// The order worker records one with -history; the chaos driver gathers the
// histories of its workers and checks them for linearizability against a
// model of the record. Keys are written as they are: a history is test
// data, not a log.
package storehistory

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
)

// The kinds of event.
const (
	KindCall   = "call"   // a store call began
	KindReturn = "return" // it returned (same ID)
	KindSettle = "settle" // the consumer told the source what to do with a message
)

// The store operations recorded.
const (
	OpClaim         = "claim"
	OpClaimComplete = "claim_complete"
	OpComplete      = "complete"
	OpFail          = "fail"
	OpExtend        = "extend"
	OpGet           = "get"
)

// The outcomes of a return.
const (
	// OutcomeOK: the call succeeded (a claim not acquired included).
	OutcomeOK = "ok"
	// OutcomeFail: the call surely changed nothing and says why: a lost
	// lease, a key not found.
	OutcomeFail = "fail"
	// OutcomeRefused: a business write's condition failed; nothing was
	// committed.
	OutcomeRefused = "refused"
	// OutcomeUnknown: an error that leaves open whether the call took
	// effect (a timeout, a reset connection, a store error).
	OutcomeUnknown = "unknown"
)

// Record is the part of a dedup.Record a history keeps.
type Record struct {
	Status  dedup.Status `json:"status"`
	Version int64        `json:"version"`
	Owner   string       `json:"owner,omitempty"`
}

// Event is one line of a history. A call and its return share ID; a call
// without a return is a call whose process ended first.
type Event struct {
	ID   int64  `json:"id"`
	Kind string `json:"ev"`
	Op   string `json:"op,omitempty"`
	Key  string `json:"key"`
	// Time is when the event was written, in Unix nanoseconds: before the
	// call, after the return.
	Time int64 `json:"t"`

	// Calls: the claim's or the lease's owner and version, the request's
	// Now, and the expiry it asks for (LeaseUntil, ExpiresAt or RetryAt;
	// Unix nanoseconds); DeadLetter for a Fail keeping a dead letter.
	Owner      string `json:"owner,omitempty"`
	Version    int64  `json:"version,omitempty"`
	Now        int64  `json:"now,omitempty"`
	Until      int64  `json:"until,omitempty"`
	DeadLetter bool   `json:"dead_letter,omitempty"`

	// Returns: the outcome; for a claim whether it was acquired, the
	// record it wrote (acquired) or met (not acquired) and the expired
	// record it replaced; for a Get the record read. Err is the error's
	// text (it never holds a key).
	Outcome  string  `json:"out,omitempty"`
	Acquired bool    `json:"acquired,omitempty"`
	Record   *Record `json:"record,omitempty"`
	Previous *Record `json:"previous,omitempty"`
	Err      string  `json:"err,omitempty"`

	// Settles: the action (ack, retry, dead_letter) and Outcome ok or
	// unknown (the source reported an error).
	Action string `json:"action,omitempty"`

	// Offset rows (Offsets): a Commit's call carries its lease's Token,
	// the From its batch starts at and the Next it stores; an Acquire's
	// or an Offset read's return the row's Token and Next (-1: no offset
	// stored yet). Refusal says why a Commit failed for sure.
	Token   int64  `json:"token,omitempty"`
	From    int64  `json:"from,omitempty"`
	Next    int64  `json:"next,omitempty"`
	Refusal string `json:"refusal,omitempty"`
}

// Recorder is a dedup.Store that records every call on the Store it wraps,
// and a consumer.HookMessageSettled that records every settled message. It is
// safe for concurrent use. A write error stops the recording (the calls go
// on); Err reports it.
type Recorder struct {
	store dedup.Store
	now   func() time.Time

	mu   sync.Mutex
	w    io.Writer
	next int64
	err  error
	buf  []byte
}

// New returns a Recorder over store appending to w. Each event is one
// Write of one line: give it an unbuffered file, so that what a killed
// process wrote survives it.
func New(store dedup.Store, w io.Writer) *Recorder {
	return &Recorder{store: store, w: w, now: time.Now}
}

// Err returns the first error writing the history, if any.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// write stamps e, gives a call its ID, and appends it as one line.
func (r *Recorder) write(e *Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Time = r.now().UnixNano()
	if e.Kind == KindCall {
		r.next++
		e.ID = r.next
	}
	if r.err != nil {
		return
	}
	b, err := json.Marshal(e)
	if err == nil {
		r.buf = append(append(r.buf[:0], b...), '\n')
		_, err = r.w.Write(r.buf)
	}
	if err != nil {
		r.err = err
	}
}

// call records the start of op; the returned func records its end.
func (r *Recorder) call(e Event) func(ret Event, err error) {
	e.Kind = KindCall
	r.write(&e)
	return func(ret Event, err error) {
		ret.ID, ret.Kind, ret.Op, ret.Key = e.ID, KindReturn, e.Op, e.Key
		if ret.Outcome == "" {
			ret.Outcome = outcome(err)
		}
		if err != nil {
			ret.Err = err.Error()
		}
		r.write(&ret)
	}
}

// outcome classifies a store call's error: only the errors by which a
// Store says it changed nothing are a definite failure.
func outcome(err error) string {
	var be *dedup.BusinessConditionError
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, dedup.ErrLeaseLost):
		return OutcomeFail
	case errors.As(err, &be):
		return OutcomeRefused
	default:
		return OutcomeUnknown
	}
}

func unix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func of(r dedup.Record) *Record {
	return &Record{Status: r.Status, Version: r.Version, Owner: r.Owner}
}

// claimed is the return event of a claim: what it wrote or met.
func claimed(c dedup.Claim, written dedup.Status) Event {
	ret := Event{Acquired: c.Acquired}
	switch {
	case c.Acquired:
		ret.Record = &Record{Status: written, Version: c.Lease.Version, Owner: c.Lease.Owner}
		if c.Previous != nil {
			ret.Previous = of(*c.Previous)
		}
	default:
		ret.Record = of(c.Existing)
	}
	return ret
}

// Claim implements dedup.Store.
func (r *Recorder) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	return r.claim(Event{Op: OpClaim, Key: req.Key, Owner: req.Owner, Now: unix(req.Now), Until: unix(req.LeaseUntil)},
		dedup.StatusPending, func() (dedup.Claim, error) { return r.store.Claim(ctx, req) })
}

// ClaimComplete implements dedup.Store.
func (r *Recorder) ClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	return r.claim(Event{Op: OpClaimComplete, Key: req.Key, Owner: req.Owner, Now: unix(req.Now), Until: unix(req.ExpiresAt)},
		dedup.StatusCompleted, func() (dedup.Claim, error) { return r.store.ClaimComplete(ctx, req) })
}

// claim records call, a claim writing status written when acquired.
func (r *Recorder) claim(call Event, written dedup.Status, claim func() (dedup.Claim, error)) (dedup.Claim, error) {
	done := r.call(call)
	c, err := claim()
	var ret Event
	if err == nil {
		ret = claimed(c, written)
	}
	done(ret, err)
	return c, err
}

// Complete implements dedup.Store.
func (r *Recorder) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	done := r.call(Event{Op: OpComplete, Key: req.Lease.Key, Owner: req.Lease.Owner, Version: req.Lease.Version, Now: unix(req.Now), Until: unix(req.ExpiresAt)})
	err := r.store.Complete(ctx, req)
	done(Event{}, err)
	return err
}

// Fail implements dedup.Store.
func (r *Recorder) Fail(ctx context.Context, req dedup.FailRequest) error {
	done := r.call(Event{Op: OpFail, Key: req.Lease.Key, Owner: req.Lease.Owner, Version: req.Lease.Version, Now: unix(req.Now), Until: unix(req.RetryAt), DeadLetter: req.DeadLetter})
	err := r.store.Fail(ctx, req)
	done(Event{}, err)
	return err
}

// Extend implements dedup.Store.
func (r *Recorder) Extend(ctx context.Context, req dedup.ExtendRequest) error {
	done := r.call(Event{Op: OpExtend, Key: req.Lease.Key, Owner: req.Lease.Owner, Version: req.Lease.Version, Now: unix(req.Now), Until: unix(req.LeaseUntil)})
	err := r.store.Extend(ctx, req)
	done(Event{}, err)
	return err
}

// Get implements dedup.Store. A key not found is a read of nothing
// (Outcome fail, no Record).
func (r *Recorder) Get(ctx context.Context, key string) (dedup.Record, error) {
	done := r.call(Event{Op: OpGet, Key: key})
	rec, err := r.store.Get(ctx, key)
	var ret Event
	switch {
	case err == nil:
		ret.Record = of(rec)
	case errors.Is(err, dedup.ErrNotFound):
		ret.Outcome = OutcomeFail
	}
	done(ret, err)
	return rec, err
}

// Check implements dedup.Store; it reads nothing a history needs.
func (r *Recorder) Check(ctx context.Context) error { return r.store.Check(ctx) }

// Capabilities implements dedup.Store: those of the wrapped Store.
func (r *Recorder) Capabilities() dedup.Capabilities { return r.store.Capabilities() }

// Attach implements dedup.Store: it attaches the wrapped Store.
func (r *Recorder) Attach(rt dedup.Runtime) { r.store.Attach(rt) }

// OnMessageSettled implements consumer.HookMessageSettled. A message without an
// idempotency key (refused before its claim) has no history to join.
func (r *Recorder) OnMessageSettled(_ context.Context, m *consumer.Message, a consumer.Action, err error) {
	if m.IdempotencyKey == "" {
		return
	}
	e := Event{Kind: KindSettle, Key: m.IdempotencyKey, Action: a.String(), Outcome: OutcomeOK}
	if err != nil {
		e.Outcome, e.Err = OutcomeUnknown, err.Error()
	}
	r.write(&e)
}

var (
	_ dedup.Store                 = (*Recorder)(nil)
	_ consumer.HookMessageSettled = (*Recorder)(nil)
)
