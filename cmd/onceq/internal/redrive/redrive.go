// Package redrive sends dead letters back to where they came from, and
// DEAD outbox entries back to PENDING, without running any message's
// effect twice: onceq's record of each message says whether its effect
// committed.
//
// A Lot is what is redriven: an SQS dead-letter queue (SQS), a Kafka
// dead-letter topic (Kafka) or a store's DEAD outbox entries (Outbox). Run
// looks at each of its letters in turn and decides, from the message's
// record (Records), what becomes of it (an Action): a letter whose record
// says its effect committed is not re-run; one whose record failed is
// reset (dedup.Resetter) and moved back; one whose key a worker holds is
// left for later. Plan is Run without a write.
//
// Running it twice, or twice at once, moves each letter once: a Lot hands
// a letter to one Run at a time (SQS: the receipt's visibility; Kafka: a
// consumer group's partitions; an outbox: the entry's version), a letter
// is moved before it is taken off its Lot, and a reset is conditional on
// the record's version. A Run that ends between the two leaves the letter
// on its Lot, and the next Run finds its record reset or completed: a
// copy moved twice is absorbed by the consumer, as the same key.
//
// Every decision is logged with the message's key_hash (never its key),
// where it was and where it goes, and why it was there.
package redrive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/onceq/onceq/dedup"
)

// Records is what Run needs of the dedup store: a message's record, and
// the reset that lets it run again. Every dedup.Store gives both.
type Records interface {
	Get(ctx context.Context, key string) (dedup.Record, error)
	dedup.Resetter
}

// Letter is one dead letter (or DEAD outbox entry) as its Lot read it.
type Letter struct {
	// ID names it where it is: the SQS message ID, topic/partition@offset,
	// the outbox entry's hash.
	ID string
	// Key is the stored key of its message's record ("" for an outbox
	// entry, whose input completed). Never logged: KeyHash is.
	Key string
	// KeyHash is what the logs and filters know it by.
	KeyHash string
	// Reason is why it was set aside, as its Lot keeps it ("" when the
	// broker moved it with none, after its receive limit).
	Reason string
	// At is when it was set aside (an outbox entry: when it was
	// committed).
	At time.Time
	// From and To name where it is and where it goes back to.
	From, To string
	// lot's own state of the letter.
	handle any
	// keyErr is why its key could not be made (Key is "").
	keyErr error
}

// Lot is what is redriven, one letter at a time. A Lot is used by one
// Run.
type Lot interface {
	// Next returns the next letters; none (and no error) when the Lot has
	// no more for this Run.
	Next(ctx context.Context) ([]*Letter, error)
	// Move puts the letter back where it came from.
	Move(ctx context.Context, l *Letter) error
	// Settle takes a letter moved, or done with, off the Lot.
	Settle(ctx context.Context, l *Letter) error
	// Pass leaves a letter on the Lot, done with by this Run (a Lot that
	// reads in order, as a Kafka group does, moves past it).
	Pass(ctx context.Context, l *Letter) error
	// Close gives back the letters neither moved, settled nor passed
	// (they stay on the Lot, for a later run: a Lot read in order starts
	// there) and ends the Lot's work.
	Close(ctx context.Context) error
}

// planner is a Lot whose reads write (an SQS receive hides a letter and
// counts a receive): Plan tells it, before its first Next, that the run
// writes nothing, so that it undoes what its reads did as it goes; and
// asks it at the end about how many letters it could not look at so.
type planner interface {
	plan()
	unseen(ctx context.Context) int
}

// Action is what became of a letter (or would, in a Plan).
type Action string

// The actions.
const (
	// Moved: sent back, its record reset (or found absent) first.
	Moved Action = "moved"
	// Completed: its record says its effect committed: not re-run. Left
	// on its Lot unless Options.SettleCompleted.
	Completed Action = "completed"
	// Held: a worker holds its key (a live lease): left for a later run.
	Held Action = "held"
	// Passed: the filter passed over it: left.
	Passed Action = "passed"
	// Newer: set aside after the run began (a letter it moved that failed
	// again, most often): left untouched for the next run, so that a run
	// never chases the letters it made.
	Newer Action = "newer"
	// Taken: another run moved it first.
	Taken Action = "taken"
	// Failed: a store or broker call failed: left, the run stops.
	Failed Action = "failed"
	// Unaddressed: it names nowhere to go back to (a Kafka letter without
	// the original-topic header, written by another producer than
	// onceq's): left, as a held letter is, for a run told where to send
	// it; the run goes on with the others.
	Unaddressed Action = "unaddressed"
	// Untenanted: the run reads each letter's tenant (TenantKeys), and
	// this one names none (ErrNoTenant), so its record cannot be found:
	// left, as an unaddressed letter is, never moved unchecked.
	Untenanted Action = "untenanted"
)

// ErrTaken is a Lot's Move of a letter another run moved first.
var ErrTaken = errors.New("redrive: another run moved it first")

// Filter selects the letters a Run moves; the zero Filter selects all.
type Filter struct {
	// Reason, when set, selects the letters whose reason holds it.
	Reason string
	// KeyHash, when set, selects the letters of that key_hash.
	KeyHash string
	// OlderThan selects the letters set aside at least this long ago.
	OlderThan time.Duration
	// Max bounds how many letters are moved (0: no bound).
	Max int
}

// Validate says what is wrong with f, or nil.
func (f Filter) Validate() error {
	switch {
	case f.KeyHash != "" && !isKeyHash(f.KeyHash):
		return fmt.Errorf("redrive: key_hash %q: want 12 lowercase hex digits", f.KeyHash)
	case f.OlderThan < 0:
		return fmt.Errorf("redrive: older than %v: want zero or more", f.OlderThan)
	case f.Max < 0:
		return fmt.Errorf("redrive: max %d: want zero (no bound) or more", f.Max)
	}
	return nil
}

func isKeyHash(s string) bool {
	if len(s) != 12 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (f Filter) selects(l *Letter, now time.Time) bool {
	switch {
	case f.Reason != "" && !strings.Contains(l.Reason, f.Reason):
		return false
	case f.KeyHash != "" && l.KeyHash != f.KeyHash:
		return false
	case f.OlderThan > 0 && now.Sub(l.At) < f.OlderThan:
		return false
	}
	return true
}

// Options are a Run's settings.
type Options struct {
	// Rate bounds the moves per second (0: no bound).
	Rate float64
	// SettleCompleted takes off its Lot a letter whose effect committed
	// (it is never re-run either way).
	SettleCompleted bool
	// Logger logs every decision (default slog.Default()).
	Logger *slog.Logger
	// Progress, when set, is told the report so far at most every
	// ProgressEvery (default 2s), for a progress line on a long run.
	Progress      func(Report)
	ProgressEvery time.Duration
}

// Report is what a Run did (or a Plan would do).
type Report struct {
	DryRun bool
	// Seen counts the letters looked at.
	Seen int
	// By action.
	Moved, Completed, Held, Passed, Newer, Taken, Failed, Unaddressed, Untenanted int
	// Unseen is, after a dry run, about how many letters it could not look
	// at without a write (on a FIFO SQS queue, those behind the front of
	// their group).
	Unseen int
	// Started is when the run began, Took how long it ran.
	Started time.Time
	Took    time.Duration
}

func (r *Report) count(a Action) {
	r.Seen++
	switch a {
	case Moved:
		r.Moved++
	case Completed:
		r.Completed++
	case Held:
		r.Held++
	case Passed:
		r.Passed++
	case Newer:
		r.Newer++
	case Taken:
		r.Taken++
	case Failed:
		r.Failed++
	case Unaddressed:
		r.Unaddressed++
	case Untenanted:
		r.Untenanted++
	}
}

// String is the report's summary line.
func (r Report) String() string {
	verb := "moved"
	if r.DryRun {
		verb = "would move"
	}
	s := fmt.Sprintf("%d looked at: %s %d, %d completed (not re-run), %d held by a worker, %d passed over by the filter, %d moved by another run, %d failed, %d newer than the run (left for the next), %d naming nowhere to go back to (left), %d naming no tenant (left)",
		r.Seen, verb, r.Moved, r.Completed, r.Held, r.Passed, r.Taken, r.Failed, r.Newer, r.Unaddressed, r.Untenanted)
	if r.Unseen > 0 {
		s += fmt.Sprintf(", about %d not looked at (behind the first of their FIFO group, which a dry run does not move)", r.Unseen)
	}
	return s + ", in " + r.Took.Round(time.Millisecond).String()
}

// Plan is Run with no write: what Run would do to each letter, logged and
// counted, the Lot given back untouched.
func Plan(ctx context.Context, lot Lot, recs Records, f Filter, o Options) (Report, error) {
	return run(ctx, lot, recs, f, o, true)
}

// Run redrives the letters of lot that f selects, and closes lot.
func Run(ctx context.Context, lot Lot, recs Records, f Filter, o Options) (Report, error) {
	return run(ctx, lot, recs, f, o, false)
}

func run(ctx context.Context, lot Lot, recs Records, f Filter, o Options, dry bool) (rep Report, err error) {
	if err := f.Validate(); err != nil {
		return Report{}, err
	}
	if !(o.Rate >= 0) { // NaN too
		return Report{}, fmt.Errorf("redrive: rate %v: want zero (no bound) or more", o.Rate)
	}
	r := &runner{lot: lot, recs: recs, f: f, o: o, dry: dry, log: o.Logger, started: time.Now()}
	if r.log == nil {
		r.log = slog.Default()
	}
	if o.Rate > 0 {
		// A rate so small that its interval overflows a Duration waits
		// the longest one, rather than wrapping to no wait at all.
		r.pace = &pacer{every: time.Duration(math.MaxInt64)}
		if every := float64(time.Second) / o.Rate; every < math.MaxInt64 {
			r.pace.every = time.Duration(every)
		}
	}
	every := o.ProgressEvery
	if every <= 0 {
		every = 2 * time.Second
	}
	p, planned := lot.(planner)
	planned = planned && dry
	if planned {
		p.plan()
	}
	rep = Report{DryRun: dry, Started: time.Now()}
	lastProgress := rep.Started
	defer func() {
		if planned {
			rep.Unseen = p.unseen(context.WithoutCancel(ctx))
		}
		if cerr := lot.Close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, cerr)
		}
		rep.Took = time.Since(rep.Started)
	}()
	for {
		letters, err := lot.Next(ctx)
		if err != nil {
			return rep, err
		}
		if len(letters) == 0 {
			return rep, nil
		}
		for _, l := range letters {
			if f.Max > 0 && rep.Moved >= f.Max {
				return rep, nil // the rest are given back by Close
			}
			a, err := r.one(ctx, l)
			rep.count(a)
			if err != nil {
				return rep, err
			}
			if o.Progress != nil && time.Since(lastProgress) >= every {
				lastProgress = time.Now()
				p := rep
				p.Took = lastProgress.Sub(rep.Started)
				o.Progress(p)
			}
		}
	}
}

type runner struct {
	lot  Lot
	recs Records
	f    Filter
	o    Options
	dry  bool
	log  *slog.Logger
	pace *pacer
	// started: a letter set aside after it is Newer.
	started time.Time
}

// maxRereads bounds how often one letter's record is read again after a
// reset refused for a change: each change is a worker's, which settles it.
const maxRereads = 3

// one decides and does what becomes of l.
func (r *runner) one(ctx context.Context, l *Letter) (Action, error) {
	if l.At.After(r.started) {
		// Neither passed nor settled: a Lot read in order stops short of
		// it, and the next run finds it.
		return r.logged(ctx, l, Newer, "set aside after the run began", nil), nil
	}
	if !r.f.selects(l, time.Now()) {
		return r.pass(ctx, l, Passed, "")
	}
	if l.To == "" {
		// Neither passed nor settled: a run that names a destination for
		// it (on Kafka, -kafka-topic) finds it again.
		return r.logged(ctx, l, Unaddressed, "it names no destination to go back to; run again naming one", nil), nil
	}
	if errors.Is(l.keyErr, ErrNoTenant) {
		// Neither passed nor settled: its record is under a tenant the
		// run cannot tell. Moved unchecked, a failed message would meet
		// its record un-reset, and a completed one be counted moved.
		return r.logged(ctx, l, Untenanted, l.keyErr.Error()+"; its record cannot be found: left", nil), nil
	}
	var version int64 = -1 // no record to reset
	if l.Key != "" {
		for i := 0; ; i++ {
			rec, err := r.recs.Get(ctx, l.Key)
			switch {
			case errors.Is(err, dedup.ErrNotFound):
				version = -1
			case err != nil:
				return r.logged(ctx, l, Failed, "", fmt.Errorf("redrive: reading the record of key_hash %s: %w", l.KeyHash, err)), err
			case rec.Status == dedup.StatusCompleted:
				// Its effect committed: running it again would do it twice.
				const why = "its record is COMPLETED: the effect committed"
				if r.o.SettleCompleted && !r.dry {
					if err := r.lot.Settle(ctx, l); err != nil {
						return r.logged(ctx, l, Failed, "", err), err
					}
					return r.logged(ctx, l, Completed, why+"; taken off "+l.From, nil), nil
				}
				return r.pass(ctx, l, Completed, why)
			case !dedup.Resettable(rec, time.Now()):
				// Neither passed nor settled: left for a later run, which a
				// Lot read in order starts from it.
				return r.logged(ctx, l, Held, fmt.Sprintf("a worker holds its key until %s", rec.ExpiresAt.UTC().Format(time.RFC3339)), nil), nil
			default:
				version = rec.Version
			}
			if version < 0 || r.dry {
				break
			}
			err = r.recs.Reset(ctx, dedup.ResetRequest{Key: l.Key, Version: version, Now: time.Now(),
				Reason: fmt.Sprintf("redriven from %s (%s) to %s", l.From, l.ID, l.To)})
			if err == nil {
				break
			}
			if !errors.Is(err, dedup.ErrRecordChanged) || i == maxRereads {
				return r.logged(ctx, l, Failed, "", err), err
			}
		}
	}
	if r.dry {
		return r.logged(ctx, l, Moved, "", nil), nil
	}
	if r.pace != nil {
		if err := r.pace.wait(ctx); err != nil {
			return r.logged(ctx, l, Failed, "", err), err
		}
	}
	if err := r.lot.Move(ctx, l); errors.Is(err, ErrTaken) {
		return r.logged(ctx, l, Taken, err.Error(), nil), nil
	} else if err != nil {
		return r.logged(ctx, l, Failed, "", err), err
	}
	if err := r.lot.Settle(ctx, l); err != nil {
		// Moved but still on its Lot: the next run finds its record reset
		// or completed, and a copy moved twice is absorbed downstream.
		return r.logged(ctx, l, Failed, "moved, but not taken off "+l.From, err), err
	}
	what := "record reset"
	if version < 0 {
		what = "no record"
	}
	return r.logged(ctx, l, Moved, what, nil), nil
}

// pass leaves l on its Lot as a, done with (but in a dry run).
func (r *runner) pass(ctx context.Context, l *Letter, a Action, why string) (Action, error) {
	if !r.dry {
		if err := r.lot.Pass(ctx, l); err != nil {
			return r.logged(ctx, l, Failed, "", err), err
		}
	}
	return r.logged(ctx, l, a, why, nil), nil
}

// logged logs the decision a on l and returns it.
func (r *runner) logged(ctx context.Context, l *Letter, a Action, why string, err error) Action {
	level, msg := slog.LevelInfo, "redrive: "+string(a)
	if r.dry {
		msg = "redrive (dry run): would be " + string(a)
	}
	attrs := []slog.Attr{slog.String("id", l.ID), slog.String("key_hash", l.KeyHash), slog.String("from", l.From), slog.String("to", l.To),
		slog.String("reason", l.Reason)}
	if why != "" {
		attrs = append(attrs, slog.String("why", why))
	}
	if err != nil {
		level = slog.LevelError
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	if a == Passed || a == Newer {
		level = slog.LevelDebug
	}
	r.log.LogAttrs(ctx, level, msg, attrs...)
	return a
}

// pacer spaces moves at least every apart.
type pacer struct {
	every time.Duration
	next  time.Time
}

func (p *pacer) wait(ctx context.Context) error {
	now := time.Now()
	if d := p.next.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		now = p.next
	}
	p.next = now.Add(p.every)
	return nil
}
