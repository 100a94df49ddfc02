package batch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/retry"
)

// Handler handles the records of one partition, in offset order, and
// returns the batch's business writes, of the Store's own types. It may
// run again for a part of a batch (a split) or the same records (a
// retry): it must have no effect but the writes it returns. A write the
// Store does not commit (a handler written for another Store) stops Run
// with an error wrapping dedup.ErrUnsupportedWrite: nothing is committed
// and no record is dead-lettered.
type Handler interface {
	HandleBatch(ctx context.Context, msgs []*broker.Message) (writes []dedup.Write, err error)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, msgs []*broker.Message) ([]dedup.Write, error)

// HandleBatch calls f.
func (f HandlerFunc) HandleBatch(ctx context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
	return f(ctx, msgs)
}

// RecordError is a handler error that names the record that failed, by
// its index in the batch: the Runner then splits the batch around it
// straight away instead of halving it until it finds it.
type RecordError struct {
	Index int
	Err   error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("batch: record %d of the batch: %v", e.Index, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// Feed is one assigned partition as a Kafka source gives it to a Runner.
type Feed interface {
	// Records are the partition's records in offset order, from the
	// stored next offset (Lease.Next) on, or from where the group's
	// commit or reset policy says when there is no row yet.
	Records() <-chan *broker.Message
	// DeadLetter produces a record that failed its attempts to the
	// source's dead-letter topic.
	DeadLetter(ctx context.Context, m *broker.Message, reason string) error
	// CommitGroup commits next as the group's offset of the partition.
	// It follows the Store, for lag tools only: nothing reads it back.
	CommitGroup(ctx context.Context, next int64) error
}

// Runner runs a Handler over partitions' records in batches, committing
// each batch's writes with the partition's next offset through a Store.
// One Runner serves every partition of a source; Run serves one
// partition. It starts no goroutine.
type Runner struct {
	store Store
	h     Handler
	cfg   config
	tel   *telemetry
}

// NewRunner makes a Runner committing h's batches through store: a
// dedup.Store's batch view, which it hands over in its Capabilities
// (dedup.Capabilities.Offsets; nil for a Store that keeps no offset
// rows):
//
//	offsets := st.Capabilities().Offsets
//	if offsets == nil { /* the Store has no batch mode */ }
//	r, err := batch.NewRunner(offsets, h)
func NewRunner(store Store, h Handler, opts ...Option) (*Runner, error) {
	if store == nil || h == nil {
		return nil, fmt.Errorf("%w: a Runner needs a Store and a Handler", ErrInvalidConfig)
	}
	// A nil pointer or func in a non-nil interface (a Store's batch view
	// never made, a nil HandlerFunc) would crash a partition's goroutine at
	// its first call.
	if configerr.NilValue(store) {
		return nil, fmt.Errorf("%w: a Runner was given a nil %T as its Store", ErrInvalidConfig, store)
	}
	if configerr.NilValue(h) {
		return nil, fmt.Errorf("%w: a Runner was given a nil %T as its Handler", ErrInvalidConfig, h)
	}
	cfg := defaults()
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	tel, err := newTelemetry(cfg.meter)
	if err != nil {
		return nil, fmt.Errorf("batch: metrics: %w", err)
	}
	return &Runner{store: store, h: h, cfg: cfg, tel: tel}, nil
}

// Acquire takes p's offset row for member, on assignment; the source then
// starts the partition's records at the Lease's Next (when not -1).
func (r *Runner) Acquire(ctx context.Context, p Partition, member string) (Lease, error) {
	l, err := r.store.Acquire(ctx, p, member)
	if err != nil {
		return Lease{}, fmt.Errorf("batch: %s: taking the offset row: %w", p, err)
	}
	return l, nil
}

// Run handles lease's partition from feed until ctx ends (it returns
// ctx's error), the feed's Records close (the records taken commit as a
// last batch; it returns nil) or the partition moved to another member
// (an error that wraps ErrFenced: nothing of the batch was committed). A batch is
// handled once it holds MaxRecords records, or Window after its first
// record came.
func (r *Runner) Run(ctx context.Context, lease Lease, feed Feed) error {
	pr := &partRun{r: r, lease: lease, feed: feed, group: -1, first: -1, taken: -1}
	in := feed.Records()
	var (
		buf      []*broker.Message
		timer    *time.Timer
		deadline <-chan time.Time
		// The group's offset behind the stored one (a group commit that
		// failed, or one an earlier owner never made) is committed again
		// after groupRetry, or by the next batch.
		gtimer *time.Timer
		gretry <-chan time.Time
	)
	stop := func() {
		if timer != nil {
			timer.Stop()
			timer, deadline = nil, nil
		}
	}
	defer stop()
	armGroup := func() {
		if gtimer == nil && pr.lease.Next >= 0 && pr.group != pr.lease.Next {
			gtimer = time.NewTimer(groupRetry)
			gretry = gtimer.C
		}
	}
	defer func() {
		if gtimer != nil {
			gtimer.Stop()
		}
	}()
	if lease.Next >= 0 {
		pr.commitGroup(ctx)
	}
	armGroup()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-gretry:
			gtimer, gretry = nil, nil
			pr.commitGroup(ctx)
			armGroup()
			continue
		case m, ok := <-in:
			if !ok {
				// The feed ended (a Lambda event's records, say): the
				// records taken make a last batch.
				stop()
				if len(buf) > 0 {
					if err := pr.process(ctx, buf); err != nil {
						return err
					}
				}
				return ctx.Err()
			}
			if pr.lease.Next >= 0 && m.Origin.Offset < pr.lease.Next || m.Origin.Offset <= pr.taken {
				continue // committed or taken already: a refetch
			}
			pr.taken = m.Origin.Offset
			if pr.first < 0 {
				pr.first = m.Origin.Offset
			}
			if buf == nil {
				// Room for a whole batch up to a bound, not grown by doubling.
				buf = make([]*broker.Message, 0, min(r.cfg.maxRecords, maxPrealloc))
			}
			buf = append(buf, m)
			if len(buf) == 1 {
				timer = time.NewTimer(r.cfg.window)
				deadline = timer.C
			}
			if len(buf) < r.cfg.maxRecords {
				continue
			}
		case <-deadline:
		}
		stop()
		msgs := buf
		buf = nil // the handler may keep msgs
		if err := pr.process(ctx, msgs); err != nil {
			return err
		}
		armGroup()
	}
}

// maxPrealloc bounds the room a batch's buffer takes before its records
// come: MaxRecords may be far above what a window brings.
const maxPrealloc = 1024

// groupRetry is how long a group offset behind the stored one waits
// before it is committed again.
const groupRetry = time.Second

// partRun is one Run's state.
type partRun struct {
	r     *Runner
	lease Lease
	feed  Feed
	// group is the group offset last committed; -1 before the first.
	group int64
	// first is the offset of the first record Run took: a partition with
	// no row yet starts its first commit there.
	first int64
	// taken is the offset of the last record Run took (-1 before the
	// first): a record at or below it is one the feed gave again.
	taken int64
}

// process handles and commits one batch, whole or in parts.
func (pr *partRun) process(ctx context.Context, msgs []*broker.Message) error {
	next := msgs[len(msgs)-1].Origin.Offset + 1
	if pr.r.cfg.keys {
		return pr.runKeyed(ctx, msgs, next)
	}
	return pr.run(ctx, msgs, nil, next)
}

// runKeyed claims each record's key with the batch: a record whose key
// an earlier record of the batch holds is dropped here, and those the
// Store finds COMPLETED are dropped before the rest commit.
func (pr *partRun) runKeyed(ctx context.Context, msgs []*broker.Message, next int64) error {
	keys := make(keyed, 0, len(msgs))
	kept := msgs[:0:0]
	seen := make(map[string]struct{}, len(msgs))
	for i, m := range msgs {
		k, hash, err := pr.r.cfg.keyOf(m)
		if err != nil {
			// A record with no valid key cannot be claimed: it fails alone.
			if err := pr.runParts(ctx, msgs[:i], nil, m.Origin.Offset); err != nil {
				return err
			}
			if err := pr.deadLetter(ctx, m, fmt.Errorf("batch: the record's idempotency key: %w", err)); err != nil {
				return err
			}
			return pr.runKeyed(ctx, msgs[i+1:], next)
		}
		if _, dup := seen[k]; dup {
			pr.r.tel.duplicates(ctx, 1)
			continue
		}
		seen[k] = struct{}{}
		keys = append(keys, claim{k, hash})
		kept = append(kept, m)
	}
	return pr.run(ctx, kept, keys, next)
}

// runParts runs msgs (keys, when keyed, being theirs) as a batch ending at
// next, unless there is nothing to run.
func (pr *partRun) runParts(ctx context.Context, msgs []*broker.Message, keys keyed, next int64) error {
	if len(msgs) == 0 {
		return nil
	}
	if pr.r.cfg.keys && keys == nil {
		return pr.runKeyed(ctx, msgs, next)
	}
	return pr.run(ctx, msgs, keys, next)
}

// run handles msgs and commits their writes with next as the partition's
// next offset, splitting them where a commit is too large or a record
// fails. msgs may be empty (all dropped as duplicates): then only the
// offset moves.
func (pr *partRun) run(ctx context.Context, msgs []*broker.Message, keys keyed, next int64) error {
	for {
		var writes []dedup.Write
		if len(msgs) > 0 {
			w, err := pr.r.h.HandleBatch(ctx, msgs)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return pr.isolate(ctx, msgs, keys, next, err)
			}
			writes = w
		}
		err := pr.commit(ctx, msgs, writes, keys, next)
		var large *TooLargeError
		var dups *DuplicateKeysError
		var cond *dedup.BusinessConditionError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &large) && len(msgs) > 0:
			if len(msgs) == 1 {
				// One record's writes do not fit one transaction: no split
				// helps, and no retry.
				return pr.deadLetterAt(ctx, msgs[0], err, next)
			}
			return pr.split(ctx, msgs, keys, len(msgs)/2, next)
		case errors.As(err, &dups):
			pr.r.tel.duplicates(ctx, len(dups.Indexes))
			msgs, keys = drop(msgs, keys, dups.Indexes)
			continue // the handler runs again on the rest: its writes were for all
		case errors.As(err, &cond) || len(msgs) > 0 && retry.Classify(err) == retry.Permanent:
			// A write's own condition, or the Store refusing the batch's
			// writes for good (two writes to one item, say), is the
			// batch's records' doing, as a handler error would be.
			return pr.isolate(ctx, msgs, keys, next, err)
		default:
			return err
		}
	}
}

// split runs msgs[:i] then msgs[i:], each part committing its own offset.
func (pr *partRun) split(ctx context.Context, msgs []*broker.Message, keys keyed, i int, next int64) error {
	var k1, k2 keyed
	if keys != nil {
		k1, k2 = keys[:i], keys[i:]
	}
	if err := pr.run(ctx, msgs[:i], k1, msgs[i-1].Origin.Offset+1); err != nil {
		return err
	}
	return pr.run(ctx, msgs[i:], k2, next)
}

// isolate finds the failing record of msgs by splitting around it (at the
// record a RecordError names, else in halves); a record that fails alone
// is retried, then dead-lettered.
func (pr *partRun) isolate(ctx context.Context, msgs []*broker.Message, keys keyed, next int64, err error) error {
	if len(msgs) == 1 {
		return pr.retrySingle(ctx, msgs[0], keys, next, err)
	}
	var re *RecordError
	if errors.As(err, &re) && re.Index >= 0 && re.Index < len(msgs) {
		i := re.Index
		var before, one, after keyed
		if keys != nil {
			before, one, after = keys[:i], keys[i:i+1], keys[i+1:]
		}
		if i > 0 {
			if err := pr.run(ctx, msgs[:i], before, msgs[i].Origin.Offset); err != nil {
				return err
			}
		}
		// The record runs alone next: its attempts count its runs alone.
		if i == len(msgs)-1 {
			return pr.run(ctx, msgs[i:], one, next)
		}
		if err := pr.run(ctx, msgs[i:i+1], one, msgs[i+1].Origin.Offset); err != nil {
			return err
		}
		return pr.run(ctx, msgs[i+1:], after, next)
	}
	pr.r.tel.splits(ctx)
	return pr.split(ctx, msgs, keys, len(msgs)/2, next)
}

// retrySingle runs m alone, after it failed alone with err, until it commits or
// has failed MaxAttempts times, or with a decided error; then it is
// dead-lettered and its offset committed.
func (pr *partRun) retrySingle(ctx context.Context, m *broker.Message, keys keyed, next int64, err error) error {
	for attempt := 1; ; attempt++ {
		pr.r.cfg.logger.Warn("batch: a record failed", "partition", pr.lease.Partition.String(),
			"offset", m.Origin.Offset, "attempt", attempt, "error", err.Error())
		if attempt >= pr.r.cfg.maxAttempts || decided(err) {
			return pr.deadLetterAt(ctx, m, err, next)
		}
		if werr := sleep(ctx, pr.r.cfg.retryDelay(attempt)); werr != nil {
			return werr
		}
		writes, herr := pr.r.h.HandleBatch(ctx, []*broker.Message{m})
		if herr == nil {
			cerr := pr.commit(ctx, []*broker.Message{m}, writes, keys, next)
			var dups *DuplicateKeysError
			var large *TooLargeError
			var cond *dedup.BusinessConditionError
			switch {
			case cerr == nil:
				return nil
			case errors.As(cerr, &dups):
				pr.r.tel.duplicates(ctx, 1)
				return pr.commit(ctx, nil, nil, nil, next)
			case errors.As(cerr, &large):
				return pr.deadLetterAt(ctx, m, cerr, next)
			case errors.As(cerr, &cond) || retry.Classify(cerr) == retry.Permanent:
				return pr.deadLetterAt(ctx, m, cerr, next)
			default:
				return cerr
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err = herr
	}
}

// decided reports an error no retry changes: of retry class Permanent,
// or a write's own condition refusing the record's writes (as a
// per-message handler's write is rejected for good).
func decided(err error) bool {
	var cond *dedup.BusinessConditionError
	return retry.Classify(err) == retry.Permanent || errors.As(err, &cond)
}

// deadLetter dead-letters m, with no retry: what failed would fail again.
func (pr *partRun) deadLetter(ctx context.Context, m *broker.Message, err error) error {
	return pr.deadLetterAt(ctx, m, err, m.Origin.Offset+1)
}

// deadLetterAt produces m to the dead-letter topic, then commits the
// offset past it (next) with no writes. A dead letter that cannot be
// produced holds the partition: m is not skipped, and the produce is
// tried again, backing off.
func (pr *partRun) deadLetterAt(ctx context.Context, m *broker.Message, cause error, next int64) error {
	reason := cause.Error()
	for attempt := 1; ; attempt++ {
		err := pr.feed.DeadLetter(ctx, m, reason)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pr.r.cfg.logger.Error("batch: dead-lettering a record failed; the partition waits for it",
			"partition", pr.lease.Partition.String(), "offset", m.Origin.Offset, "error", err.Error())
		if werr := sleep(ctx, pr.r.cfg.retryDelay(attempt)); werr != nil {
			return werr
		}
	}
	pr.r.tel.deadLettered(ctx, pr.lease.Partition)
	return pr.commit(ctx, nil, nil, nil, next)
}

// commit commits writes and keys with next as the partition's next
// offset, through the Store, then the group offset. A Store error other
// than a refusal (fenced, too large, duplicates, a write's condition, an
// error of class Permanent) is retried, backing off, until ctx ends: the
// batch stays as it is.
func (pr *partRun) commit(ctx context.Context, msgs []*broker.Message, writes []dedup.Write, keys keyed, next int64) error {
	now := time.Now()
	from := pr.lease.Next
	if from < 0 {
		from = pr.first
	}
	c := Commit{Lease: pr.lease, From: from, Next: next, Writes: writes, Now: now}
	if len(keys) > 0 {
		c.Keys, c.PayloadHashes = keys.split()
		c.ExpiresAt = now.Add(pr.r.cfg.retention)
	}
	for attempt := 1; ; attempt++ {
		start := time.Now()
		// A batch whose handler finished is committed even if ctx ended
		// meanwhile (the partition revoked): the offset row's token
		// decides, and a partition that did not move keeps the work.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
		err := pr.r.store.Commit(cctx, c)
		cancel()
		pr.r.tel.committed(ctx, pr.lease.Partition, len(msgs), time.Since(start), err)
		if err == nil {
			break
		}
		if errors.Is(err, ErrFenced) {
			pr.r.cfg.logger.Warn("batch: the partition moved to another member; its batch was not committed",
				"partition", pr.lease.Partition.String(), "member", pr.lease.Member)
			return fmt.Errorf("batch: %s: %w", pr.lease.Partition, err)
		}
		var large *TooLargeError
		var dups *DuplicateKeysError
		var cond *dedup.BusinessConditionError
		if errors.As(err, &large) || errors.As(err, &dups) || errors.As(err, &cond) || ctx.Err() != nil {
			return err
		}
		if retry.Classify(err) == retry.Permanent {
			// The same commit is refused again: no retry helps.
			return fmt.Errorf("batch: %s: %w", pr.lease.Partition, err)
		}
		if errors.Is(err, ErrOffsetMismatch) && attempt > 1 && pr.landed(ctx, next) {
			break // an earlier attempt committed, its answer lost
		}
		if errors.Is(err, dedup.ErrUnsupportedWrite) {
			// A write of a type the Store does not commit: a handler
			// written for another Store, which every batch meets alike.
			// The deployment's fault: stop, blame no record.
			pr.r.cfg.logger.Error("batch: the Store refused the handler's writes as of another Store; the partition stops here",
				"partition", pr.lease.Partition.String(), "error", err.Error())
			return fmt.Errorf("batch: %s: %w", pr.lease.Partition, err)
		}
		if errors.Is(err, ErrOffsetMismatch) || errors.Is(err, ErrInvalidCommit) {
			// This member's view of the partition is not the Store's:
			// stop, and let the next assignment resume from the row.
			pr.r.cfg.logger.Error("batch: the Store refused the batch's offsets; the partition stops here",
				"partition", pr.lease.Partition.String(), "from", from, "next", next, "error", err.Error())
			return fmt.Errorf("batch: %s: %w", pr.lease.Partition, err)
		}
		pr.r.cfg.logger.Warn("batch: committing a batch failed; trying again",
			"partition", pr.lease.Partition.String(), "attempt", attempt, "error", err.Error())
		if werr := sleep(ctx, pr.r.cfg.retryDelay(attempt)); werr != nil {
			return werr
		}
	}
	pr.lease.Next = next
	pr.commitGroup(ctx)
	return nil
}

// commitGroup commits the stored next offset as the group's. The Store
// holds the truth: a failure is retried later (Run), or carried by the
// next batch's commit.
func (pr *partRun) commitGroup(ctx context.Context) {
	next := pr.lease.Next
	if err := pr.feed.CommitGroup(ctx, next); err != nil {
		pr.r.cfg.logger.Debug("batch: committing the group offset failed",
			"partition", pr.lease.Partition.String(), "error", err.Error())
	} else {
		pr.group = next
	}
	if pr.group >= 0 {
		pr.r.tel.groupLag(ctx, pr.lease.Partition, next-pr.group)
	}
}

// landed reports whether the stored row is this lease's at next: a commit
// whose answer was lost committed.
func (pr *partRun) landed(ctx context.Context, next int64) bool {
	row, err := pr.r.store.Offset(ctx, pr.lease.Partition)
	return err == nil && row.Token == pr.lease.Token && row.Next == next
}

// commitTimeout bounds one Store commit.
const commitTimeout = 30 * time.Second

// claim is a record's key and payload hash, claimed with its batch.
type claim struct{ key, hash string }

// keyed are a batch's records' claims, one per record.
type keyed []claim

// split returns the keys and their payload hashes (nil when none has
// one: a key that covers its body needs none).
func (ks keyed) split() (keys, hashes []string) {
	keys = make([]string, len(ks))
	hashed := false
	for i, k := range ks {
		keys[i] = k.key
		hashed = hashed || k.hash != ""
	}
	if hashed {
		hashes = make([]string, len(ks))
		for i, k := range ks {
			hashes[i] = k.hash
		}
	}
	return keys, hashes
}

// drop removes the records at idx (sorted or not) from msgs and keys.
func drop(msgs []*broker.Message, keys keyed, idx []int) ([]*broker.Message, keyed) {
	gone := make(map[int]bool, len(idx))
	for _, i := range idx {
		gone[i] = true
	}
	var m2 []*broker.Message
	var k2 keyed
	for i := range msgs {
		if !gone[i] {
			m2 = append(m2, msgs[i])
			k2 = append(k2, keys[i])
		}
	}
	return m2, k2
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// keyFrom is the stored key of f's key under namespace, and the body's
// payload hash, as the per-message consumer's WithKeyFunc makes them.
func keyFrom(namespace string, f func(*broker.Message) (string, error)) func(m *broker.Message) (string, string, error) {
	return func(m *broker.Message) (string, string, error) {
		k, err := f(m)
		if err != nil {
			return "", "", err
		}
		key, err := dedup.Key(namespace, k)
		return key, dedup.PayloadHash(m.Body), err
	}
}

// keyOf is a record's stored idempotency key and payload hash: the
// scheme of the per-message consumer with a Kafka source's default key
// (the idempotency-key header, else the fingerprint of topic, key and
// value, which covers the body and so takes no hash), under namespace,
// and its default payload hash.
func keyOf(namespace string) func(m *broker.Message) (string, string, error) {
	return func(m *broker.Message) (string, string, error) {
		k, err := broker.Fingerprint(m)
		if err != nil {
			return "", "", err
		}
		if broker.FingerprintCoversBody(m) {
			key, err := dedup.DerivedKey(namespace, k)
			return key, "", err
		}
		key, err := dedup.Key(namespace, k)
		return key, dedup.PayloadHash(m.Body), err
	}
}
