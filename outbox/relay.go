package outbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/retry"
)

// Relay sends a Store's pending entries through a Sender and marks them
// dispatched.
//
// Each pass leases up to a batch of entries, fenced by the relay's owner
// token, so that relays on several machines never send one entry at the
// same time. Within a lane (a Destination and an OrderingKey) it sends an
// entry only once every earlier one was taken or refused: the entries of
// a lane go out one per Send call, in order, while the entries of
// different lanes (and those with no OrderingKey) share each call; a
// LaneSender, which keeps a lane's order within a call, takes the whole
// pass in one call, each lane's entries in order. An
// entry whose send fails for a reason of the moment is given back with a
// backoff (Store.Retry), and the entries of its lane behind it with it,
// unsent (Store.Release: their own attempts are not counted); an entry the
// destination refuses (ErrRefused) is marked Dead and never blocks those
// behind it.
//
// A relay that dies, or outlives its lease, between sending an entry and
// marking it leaves it to be sent again: the destination sees it at least
// once, with the same ID, and an onceq consumer downstream takes the copy
// as a duplicate.
type Relay struct {
	store   Store
	sender  Sender
	cfg     config
	tel     *telemetry
	running atomic.Bool
}

// NewRelay returns a Relay that sends store's entries through sender.
// store is the relay's view of a dedup.Store's outbox, which the Store
// hands over in its Capabilities (nil for a Store that keeps none):
//
//	ob := st.Capabilities().Outbox
//	if ob == nil { /* the Store commits no outgoing messages */ }
//	relay, err := outbox.NewRelay(ob, sender)
func NewRelay(store Store, sender Sender, opts ...Option) (*Relay, error) {
	cfg := config{
		batchSize:     DefaultBatchSize,
		leaseTTL:      DefaultLeaseTTL,
		pollInterval:  DefaultPollInterval,
		retention:     DefaultRetention,
		deadRetention: DefaultDeadRetention,
		retryDelay:    DefaultRetryDelay,
		maxRetryDelay: DefaultMaxRetryDelay,
		cleanupEvery:  DefaultCleanupEvery,
		concurrency:   1,
		warnAfter:     DefaultWarnAfter,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if err := cfg.validate(store, sender); err != nil {
		return nil, err
	}
	if cfg.owner == "" {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		cfg.owner = "relay-" + hex.EncodeToString(b[:])
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	tel, err := newTelemetry(cfg.tracerProvider, cfg.meterProvider)
	if err != nil {
		return nil, fmt.Errorf("outbox: creating the relay's metrics: %w", err)
	}
	return &Relay{store: store, sender: sender, cfg: cfg, tel: tel}, nil
}

func (c *config) validate(store Store, sender Sender) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("outbox: "+format+": %w", append(args, ErrInvalidConfig)...))
	}
	switch {
	case store == nil:
		bad("NewRelay needs a Store")
	case configerr.NilValue(store):
		// A Store whose Capabilities hand over a view it never made (a
		// nil pointer in a non-nil interface) would crash the relay's
		// first pass.
		bad("NewRelay was given a nil %T as its Store", store)
	}
	switch {
	case sender == nil:
		bad("NewRelay needs a Sender")
	case configerr.NilValue(sender):
		bad("NewRelay was given a nil %T as its Sender", sender)
	}
	if c.batchSize < 1 {
		bad("BatchSize %d: must be at least 1", c.batchSize)
	}
	if c.leaseTTL <= 0 {
		bad("LeaseTTL %v: must be positive", c.leaseTTL)
	}
	if c.pollInterval <= 0 {
		bad("PollInterval %v: must be positive", c.pollInterval)
	}
	if c.retention <= 0 {
		bad("Retention %v: must be positive", c.retention)
	}
	if c.deadRetention <= 0 {
		bad("DeadRetention %v: must be positive", c.deadRetention)
	}
	if c.concurrency < 1 {
		bad("Concurrency %d: must be at least 1", c.concurrency)
	}
	if c.warnAfter < 1 {
		bad("WarnAfter %d: must be at least 1", c.warnAfter)
	}
	if c.cleanupEvery <= 0 {
		bad("CleanupEvery %v: must be positive", c.cleanupEvery)
	}
	if c.retryDelay <= 0 || c.maxRetryDelay < c.retryDelay {
		bad("RetryBackoff(%v, %v): the first delay must be positive and at most the largest", c.retryDelay, c.maxRetryDelay)
	}
	return errors.Join(errs...)
}

// Owner is the relay's token, which fences its leases.
func (r *Relay) Owner() string { return r.cfg.owner }

// Run sends entries until ctx is cancelled: a pass at once, then again
// after each pass, waiting PollInterval (or a WakeOn signal) after a pass
// that found less than a full batch. After a full batch it leases the
// next while the one before is still being sent (see Concurrency). A failing pass is logged and tried
// again after PollInterval. The marks of the pass under way when ctx ends
// are still written, so that what was sent is not sent again. It returns
// nil after a cancel. A Relay runs once.
//
// The first pass runs before the others start: a misconfiguration it
// meets (retry.Misconfigured: the outbox table missing, a grant lacking)
// is returned at once, naming what the store's error names, as no later
// pass could succeed; after any other failure the passes go on, as after
// any failed pass.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	reg, err := r.tel.observeBacklog(r.store)
	if err != nil {
		return fmt.Errorf("outbox: observing the backlog: %w", err)
	}
	defer func() { _ = reg.Unregister() }()

	if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil && retry.Classify(err) == retry.Misconfigured {
		return fmt.Errorf("outbox: the relay cannot use its store: %w", err)
	}

	// A commit that lands before the wake signal listens is found by the
	// pass its first return wakes.
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	if r.cfg.wake != nil {
		wg.Go(func() { r.listen(ctx, wake) })
	}

	r.cfg.logger.InfoContext(ctx, "outbox relay started", "owner", r.cfg.owner, "batch_size", r.cfg.batchSize, "concurrency", r.cfg.concurrency)
	for i := range r.cfg.concurrency {
		// Loops lease apart, as relays on several machines do; the
		// first also cleans up.
		wg.Go(func() { r.loop(ctx, wake, i == 0) })
	}
	wg.Wait()
	r.cfg.logger.InfoContext(context.WithoutCancel(ctx), "outbox relay stopped", "owner", r.cfg.owner)
	return nil
}

// loop runs passes until ctx ends, waiting after one that found less than
// a full batch. It leases the next batch while the one before is still
// being sent: a lane's entries held by the pass in flight are not leased
// again until they are marked (Store.Lease), so that each lane keeps its
// order, while the two passes' sends overlap. At most two passes of a
// loop are under way at once.
func (r *Relay) loop(ctx context.Context, wake <-chan struct{}, cleans bool) {
	cleaner, _ := r.store.(expiredDeleter)
	if !cleans {
		cleaner = nil
	}
	var lastCleanup time.Time
	var inflight chan error // the pass being sent, nil when none
	settle := func() {
		if inflight == nil {
			return
		}
		if err := <-inflight; err != nil && ctx.Err() == nil {
			r.cfg.logger.WarnContext(ctx, "outbox relay pass failed; polling again", "error", err)
		}
		inflight = nil
	}
	defer settle()
	for ctx.Err() == nil {
		b, err := r.lease(ctx)
		if len(b.entries) > 0 {
			// The pass before this one goes on; this one is sent beside
			// it, and the loop leases again once the one before is done.
			done, leaseErr := make(chan error, 1), err
			go func() { done <- errors.Join(leaseErr, r.finish(ctx, b)) }()
			settle()
			inflight, err = done, nil
		} else {
			settle()
		}
		if ctx.Err() != nil {
			return
		}
		more := false
		if cleaner != nil && time.Since(lastCleanup) >= r.cfg.cleanupEvery {
			more = r.cleanup(ctx, cleaner)
			if !more {
				lastCleanup = time.Now()
			}
		}
		if err != nil {
			r.cfg.logger.WarnContext(ctx, "outbox relay pass failed; polling again", "error", err)
		} else if len(b.entries) >= r.cfg.batchSize || more {
			continue // more may be waiting
		}
		settle()
		t := time.NewTimer(r.cfg.pollInterval)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// expiredDeleter is a store that keeps dispatched and dead entries until
// told to delete them (PostgreSQL's outbox).
type expiredDeleter interface {
	DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error)
}

// cleanupBatch bounds the entries one cleanup deletes.
const cleanupBatch = 1000

// cleanup deletes expired entries, and reports that more may be left.
func (r *Relay) cleanup(ctx context.Context, d expiredDeleter) bool {
	n, err := d.DeleteExpired(ctx, time.Now(), cleanupBatch)
	if err != nil {
		if ctx.Err() == nil {
			r.cfg.logger.WarnContext(ctx, "outbox relay could not delete expired entries; trying again later", "error", err)
		}
		return false
	}
	return n >= cleanupBatch
}

// listen runs the WakeOn signal, nudging the pass loop each time it fires.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	for ctx.Err() == nil {
		if err := r.cfg.wake(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			r.cfg.logger.WarnContext(ctx, "outbox relay's wake signal failed; polling meanwhile", "error", err)
			t := time.NewTimer(r.cfg.pollInterval)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		select {
		case wake <- struct{}{}:
		default: // a pass is already due
		}
	}
}

// Pass leases one batch of entries, sends them and marks them: Dispatched,
// Dead or given back to Retry. It returns how many entries it leased. Run
// calls it in a loop; a caller driven by events of its own (a stream
// handler) may call it directly.
func (r *Relay) Pass(ctx context.Context) (int, error) {
	b, err := r.lease(ctx)
	if len(b.entries) == 0 {
		return 0, err
	}
	return len(b.entries), errors.Join(err, r.finish(ctx, b))
}

// batch is what one pass leased.
type batch struct {
	entries    []Entry
	leaseUntil time.Time
}

// lease leases one batch. A Lease that failed part way still holds what
// it took, returned with its error: those are sent rather than left
// leased, unsent, until their leases end.
func (r *Relay) lease(ctx context.Context) (batch, error) {
	now := time.Now()
	b := batch{leaseUntil: now.Add(r.cfg.leaseTTL)}
	var err error
	b.entries, err = r.store.Lease(ctx, LeaseRequest{Owner: r.cfg.owner, Now: now, LeaseUntil: b.leaseUntil, Max: r.cfg.batchSize})
	if err != nil {
		err = fmt.Errorf("outbox: leasing entries: %w", err)
	}
	return b, err
}

// finish sends a leased batch and marks it.
func (r *Relay) finish(ctx context.Context, b batch) error {
	for i := range b.entries {
		r.countTakeover(ctx, &b.entries[i])
	}
	p := pass{r: r, leaseUntil: b.leaseUntil}
	p.send(ctx, b.entries)
	// The marks are written even when ctx ended during the sends: what
	// was sent must not be sent again for want of a mark.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.leaseTTL)
	defer cancel()
	return p.mark(mctx)
}

// countTakeover counts an entry taken over from a relay whose lease on it
// ran out.
func (r *Relay) countTakeover(ctx context.Context, e *Entry) {
	if lapsedLeases(e) > 0 {
		r.tel.takeovers.Add(ctx, 1)
		r.cfg.logger.InfoContext(ctx, "outbox relay took over an entry whose lease ran out", "entry_hash", idHash(e.ID), "destination", e.Destination)
	}
}

// lapsedLeases counts the earlier leases of a just-leased entry that ran
// out rather than being given back. Each Lease, Retry and Release raises
// the Version by one, each Retry the Attempts and each Release the
// Releases: the leases before this one are Version-1-Attempts-Releases,
// of which Attempts+Releases were given back.
func lapsedLeases(e *Entry) int64 {
	return e.Lease.Version - 1 - 2*int64(e.Attempts+e.Releases)
}

// countRedispatch counts an entry about to be sent that may have been
// sent before: an earlier send failed (Attempts), or a relay whose lease
// ran out may have sent it. An entry given back only because it waited
// behind a failed one, or because the relay stopped, was released
// unsent, which counts no attempt.
func (r *Relay) countRedispatch(ctx context.Context, e *Entry) {
	switch {
	case e.Attempts > 0:
		r.tel.redispatch.Add(ctx, 1, r.tel.retriedOpt)
	case lapsedLeases(e) > 0:
		r.tel.redispatch.Add(ctx, 1, r.tel.takenOvrOpt)
	}
}

// The reasons of an entry given back unsent (Store.Release): with the
// failed entry ahead of it in its lane (holdBackReason, then that entry's
// error), or because the relay stopped.
const (
	unsentReason   = "not sent: "
	holdBackReason = unsentReason + "it waits behind an entry of its lane whose send failed: "
	stoppedReason  = unsentReason + "the relay stopped before sending it"
)

// laneRanks gives each entry its place in its lane (0 for the first):
// the entries of one Destination and OrderingKey keep their order; an
// entry with no OrderingKey is a lane of its own. rounds is one more
// than the largest place: 1 when no lane holds two entries, the common
// case, which one Send call takes whole.
func laneRanks(entries []Entry) (rank []int32, rounds int) {
	rank = make([]int32, len(entries))
	rounds = 1
	var next map[laneKey]int32 // a lane's next place, once it has two entries
	var first map[laneKey]struct{}
	for i := range entries {
		e := &entries[i]
		if e.OrderingKey == "" {
			continue
		}
		k := laneKey{e.Destination, e.OrderingKey}
		if first == nil {
			first = make(map[laneKey]struct{}, len(entries))
		}
		if _, seen := first[k]; !seen {
			first[k] = struct{}{}
			continue
		}
		if next == nil {
			next = map[laneKey]int32{}
		}
		r, ok := next[k]
		if !ok {
			r = 1
		}
		rank[i], next[k] = r, r+1
		rounds = max(rounds, int(r)+1)
	}
	return rank, rounds
}

// laneKey names a lane: a Destination and an OrderingKey.
type laneKey struct{ dest, key string }

// pass is one batch on its way: what was sent and how each entry ended.
type pass struct {
	r          *Relay
	leaseUntil time.Time
	dispatched []*Entry
	retry      []retryMark
	dead       []deadMark
}

// retryMark gives an entry back: after its own failed send (Retry), or
// unsent (Release), which counts no attempt.
type retryMark struct {
	e       *Entry
	reason  string
	retryAt time.Time
	unsent  bool
}

type deadMark struct {
	e      *Entry
	reason string
}

// send sends the entries in rounds: round i holds the i-th entry of every
// lane still going, so that no entry is sent before the one ahead of it
// in its lane was taken or refused. An entry whose send failed holds back
// the rest of its lane, given back with it.
func (p *pass) send(ctx context.Context, entries []Entry) {
	if ls, ok := p.r.sender.(LaneSender); ok && ls.KeepsLaneOrder() {
		p.sendLanes(ctx, entries)
		return
	}
	rank, rounds := laneRanks(entries)
	var failed map[laneKey]retryMark // a lane's failed entry, which holds back those behind it
	heldBack := func(e *Entry) bool {
		if failed == nil || e.OrderingKey == "" {
			return false
		}
		f, ok := failed[laneKey{e.Destination, e.OrderingKey}]
		if ok {
			// Until the failed entry's retry: the lane's order holds,
			// while this entry's own backoff starts at its own failures.
			p.retry = append(p.retry, retryMark{e, holdBackReason + f.reason, f.retryAt, true})
		}
		return ok
	}
	p.dispatched = make([]*Entry, 0, len(entries))
	var round []Entry
	var at []int // round's entries' indexes in entries
	for r := range rounds {
		round, at = round[:0], at[:0]
		if rounds == 1 {
			// A copy: the entries are marked by their place in entries,
			// whatever the Sender does with the slice it is handed.
			round = slices.Clone(entries)
		} else {
			for i := range entries {
				if int(rank[i]) == r && !heldBack(&entries[i]) {
					round = append(round, entries[i])
					at = append(at, i)
				}
			}
		}
		if len(round) == 0 {
			continue
		}
		if !time.Now().Before(p.leaseUntil) {
			// The leases ran out: another relay may hold them now.
			p.holdBackRest(entries, rank, r, heldBack)
			return
		}
		if ctx.Err() != nil {
			// Stopped: what is left goes back unsent, for the next relay
			// to take at once rather than once the lease runs out.
			now := time.Now()
			for i := range entries {
				// This round's entries held back are given back already.
				if int(rank[i]) < r || int(rank[i]) == r && !inRound(at, i) || heldBack(&entries[i]) {
					continue
				}
				p.retry = append(p.retry, retryMark{&entries[i], stoppedReason, now, true})
			}
			return
		}
		for i := range round {
			p.r.countRedispatch(ctx, &round[i])
		}
		errs := p.sendRound(ctx, round)
		for j, err := range errs {
			i := j
			if at != nil {
				i = at[j]
			}
			e := &entries[i]
			switch {
			case err == nil:
				p.dispatched = append(p.dispatched, e)
			case errors.Is(err, ErrRefused):
				p.dead = append(p.dead, deadMark{e, err.Error()})
			default:
				m := retryMark{e, err.Error(), time.Now().Add(p.r.backoff(e.Attempts)), false}
				p.retry = append(p.retry, m)
				if e.OrderingKey != "" && int(rank[i]) < rounds-1 {
					if failed == nil {
						failed = map[laneKey]retryMark{}
					}
					failed[laneKey{e.Destination, e.OrderingKey}] = m
				}
			}
		}
	}
}

// sendLanes sends every entry in one call to a LaneSender, lanes in
// order. An entry behind one of its lane that failed for the moment was
// not delivered (LaneSender): it is given back unsent with it, as send
// holds it back.
func (p *pass) sendLanes(ctx context.Context, entries []Entry) {
	p.dispatched = make([]*Entry, 0, len(entries))
	if !time.Now().Before(p.leaseUntil) {
		return // the leases ran out: another relay may hold them now
	}
	if ctx.Err() != nil {
		now := time.Now()
		for i := range entries {
			p.retry = append(p.retry, retryMark{&entries[i], stoppedReason, now, true})
		}
		return
	}
	for i := range entries {
		p.r.countRedispatch(ctx, &entries[i])
	}
	// A copy: the entries are marked by their place in entries, whatever
	// the Sender does with the slice it is handed.
	errs := p.sendRound(ctx, slices.Clone(entries))
	var failed map[laneKey]retryMark
	for i, err := range errs {
		e := &entries[i]
		k := laneKey{e.Destination, e.OrderingKey}
		f, behind := failed[k]
		behind = behind && e.OrderingKey != ""
		switch {
		case behind && err != nil && !errors.Is(err, ErrRefused):
			p.retry = append(p.retry, retryMark{e, holdBackReason + f.reason, f.retryAt, true})
		case err == nil:
			if behind {
				p.r.cfg.logger.ErrorContext(ctx, "outbox Sender delivered an entry behind a failed one of its lane: its KeepsLaneOrder is wrong; the lane's order is broken",
					"entry_hash", idHash(e.ID), "destination", e.Destination)
			}
			p.dispatched = append(p.dispatched, e)
		case errors.Is(err, ErrRefused):
			p.dead = append(p.dead, deadMark{e, err.Error()})
		default:
			m := retryMark{e, err.Error(), time.Now().Add(p.r.backoff(e.Attempts)), false}
			p.retry = append(p.retry, m)
			if e.OrderingKey != "" {
				if failed == nil {
					failed = map[laneKey]retryMark{}
				}
				failed[k] = m
			}
		}
	}
}

// inRound reports whether entries[i] is in the round whose indexes are
// at (nil: the one round of every entry).
func inRound(at []int, i int) bool {
	return at == nil || slices.Contains(at, i)
}

// holdBackRest gives back, when the leases ran out at round r, the
// entries held back behind a failed one; the rest is left to the relay
// that takes the leases over.
func (p *pass) holdBackRest(entries []Entry, rank []int32, r int, heldBack func(*Entry) bool) {
	for i := range entries {
		if int(rank[i]) > r {
			heldBack(&entries[i])
		}
	}
}

// sendRound hands one round to the Sender, in a span, and makes sure there
// is one error per entry.
func (p *pass) sendRound(ctx context.Context, round []Entry) []error {
	ctx, span := p.r.tel.tracer.Start(ctx, "onceq.outbox.send", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrCount.Int(len(round))))
	// The Send ends with the lease: past it, another relay may be sending
	// the same entries.
	sctx, cancel := context.WithDeadline(ctx, p.leaseUntil)
	errs := p.safeSend(sctx, round)
	cancel()
	if len(errs) != len(round) {
		err := fmt.Errorf("outbox: the Sender returned %d results for %d entries; all are sent again", len(errs), len(round))
		errs = make([]error, len(round))
		for i := range errs {
			errs[i] = err
		}
	}
	failed := 0
	for i, err := range errs {
		if err != nil {
			errs[i] = readable(err)
			failed++
		}
	}
	if failed > 0 {
		span.SetStatus(codes.Error, fmt.Sprintf("%d of %d entries not taken", failed, len(round)))
	}
	span.End()
	return errs
}

// safeSend calls the Sender, taking a panic in it as a failure of the
// moment of the whole round: an entry that makes a Sender panic would
// otherwise crash every relay that leases it.
func (p *pass) safeSend(ctx context.Context, round []Entry) (errs []error) {
	defer func() {
		if v := recover(); v != nil {
			err := fmt.Errorf("outbox: the Sender panicked: %v", v)
			errs = make([]error, len(round))
			for i := range errs {
				errs[i] = err
			}
		}
	}()
	return p.r.sender.Send(ctx, round)
}

// readable is err, or when its Error method panics (a nil pointer in a
// non-nil error: a Sender's helper returning *RefusedError, nil for
// taken), a failure of the moment that says so: the relay neither
// crashes on it nor takes it as taken or refused.
func readable(err error) (out error) {
	defer func() {
		if recover() != nil {
			out = fmt.Errorf("outbox: the Sender answered an error that cannot be read (a nil %T?); the entry is sent again", err)
		}
	}()
	_ = err.Error()
	return err
}

// backoff is the delay before an entry that failed attempts times before
// is sent again.
func (r *Relay) backoff(attempts int) time.Duration {
	d := r.cfg.retryDelay
	for range attempts {
		if d >= r.cfg.maxRetryDelay/2 {
			return r.cfg.maxRetryDelay
		}
		d *= 2
	}
	return min(d, r.cfg.maxRetryDelay)
}

// mark writes how each entry of the pass ended.
func (p *pass) mark(ctx context.Context) error {
	r := p.r
	now := time.Now()
	var errs []error
	if len(p.dispatched) > 0 {
		leases := make([]Lease, len(p.dispatched))
		for i, e := range p.dispatched {
			leases[i] = e.Lease
		}
		err := r.store.Dispatched(ctx, leases, now, now.Add(r.cfg.retention))
		lost, failed := countLost(err)
		if err != nil && lost == 0 {
			// Not one lease lost: the mark as a whole failed. The
			// entries are sent again once their leases run out.
			errs = append(errs, fmt.Errorf("outbox: marking %d entries dispatched: %w", len(leases), err))
		} else {
			if lost > 0 {
				r.cfg.logger.WarnContext(ctx, "outbox relay sent entries another relay had taken over; they are sent twice", "entries", lost)
			}
			if failed > 0 {
				// Sent but not marked: sent again once their leases run out.
				errs = append(errs, fmt.Errorf("outbox: marking %d of %d entries dispatched: %w", failed, len(leases), err))
			}
			r.tel.sent(ctx, resultLeaseLost, lost)
			r.tel.sent(ctx, resultDispatched, len(leases)-lost-failed)
			for _, e := range p.dispatched {
				r.tel.latency.Record(ctx, now.Sub(e.CreatedAt).Seconds())
			}
		}
	}
	// A Dead or Retry mark refused for a lost lease changed nothing: the
	// entry is another relay's now, and counts as lease_lost.
	lost := 0
	for _, d := range p.dead {
		if err := r.store.Dead(ctx, d.e.Lease, d.reason, now, now.Add(r.cfg.deadRetention)); errors.Is(err, ErrLeaseLost) {
			lost++
			continue
		} else if err != nil {
			errs = append(errs, fmt.Errorf("outbox: marking an entry dead: %w", err))
			continue
		}
		r.tel.sent(ctx, resultDead, 1)
		r.cfg.logger.WarnContext(ctx, "outbox entry refused by its destination; kept as DEAD", "entry_hash", idHash(d.e.ID), "destination", d.e.Destination, "reason", d.reason)
	}
	retried := 0
	for _, m := range p.retry {
		giveBack := r.store.Retry
		if m.unsent {
			giveBack = r.store.Release
		}
		if err := giveBack(ctx, m.e.Lease, m.reason, now, m.retryAt); errors.Is(err, ErrLeaseLost) {
			lost++
			continue
		} else if err != nil {
			errs = append(errs, fmt.Errorf("outbox: giving an entry back to retry: %w", err))
			continue
		}
		retried++
		r.warnFailing(ctx, m)
	}
	r.tel.sent(ctx, resultLeaseLost, lost)
	if retried > 0 {
		r.tel.sent(ctx, resultRetry, retried)
		r.cfg.logger.DebugContext(ctx, "outbox entries given back to be sent again", "entries", retried)
	}
	return errors.Join(errs...)
}

// warnFailing logs at WARN an entry whose send failed again, once its
// failures reach WarnAfter, and again each time they double: an entry
// that fails for ever is seen without a line per try. An entry given
// back unsent is not logged: the failing one ahead of it is.
func (r *Relay) warnFailing(ctx context.Context, m retryMark) {
	if m.unsent {
		return
	}
	failures := m.e.Attempts + 1
	n := r.cfg.warnAfter
	for n < failures && n <= failures/2 {
		n *= 2
	}
	if failures != n {
		return
	}
	r.cfg.logger.WarnContext(ctx, "outbox entry keeps failing to send; the relay sends it again",
		"entry_hash", idHash(m.e.ID), "destination", m.e.Destination, "seq", m.e.Seq, "attempts", failures,
		"reason", m.reason, "retry_in", time.Until(m.retryAt).Round(time.Millisecond))
}

// countLost counts the errors joined in err: those of a lease lost
// (ErrLeaseLost), and the others.
func countLost(err error) (lost, other int) {
	if err == nil {
		return 0, 0
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			l, o := countLost(e)
			lost, other = lost+l, other+o
		}
		return lost, other
	}
	if errors.Is(err, ErrLeaseLost) {
		return 1, 0
	}
	return 0, 1
}

// idHash names an entry in logs without its ID, which holds the input's
// idempotency key.
func idHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:6])
}
