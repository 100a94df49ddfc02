package kafkacore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/retry"
)

// PartState is where an assigned partition stands.
type PartState int

const (
	// Active partitions are dispatched.
	Active PartState = iota
	// Draining partitions were revoked: no dispatch, settles still count.
	Draining
	// Released partitions were committed and handed back: settles are late.
	Released
)

// Partition is one assigned partition within one assignment: assigned
// again later, it gets a new one. R is the client's record type, X the
// source's own per-partition state. Fields are guarded by the
// Dispatcher's lock.
type Partition[R, X any] struct {
	Topic  string
	ID     int32
	Gen    int32 // the generation (or member epoch) that assigned it
	State  PartState
	Tr     *Tracker
	HWM    int64                // highest log end offset a fetch reported
	LagSet metric.ObserveOption // the commit-lag gauge's attributes
	X      X

	bytes    int64          // of the records fetched and not done
	queue    []*entry[R, X] // fetched or redelivered, awaiting Receive, by offset
	inFlight int            // delivered, not settled
	timers   map[*entry[R, X]]*time.Timer
}

// NewPartition is an active partition of a new assignment.
func NewPartition[R, X any](topic string, id, gen int32, tel *Telemetry, x X) *Partition[R, X] {
	return &Partition[R, X]{Topic: topic, ID: id, Gen: gen, Tr: NewTracker(-1), LagSet: tel.PartitionSet(topic, id),
		X: x, timers: map[*entry[R, X]]*time.Timer{}}
}

// InFlight counts p's deliveries out with the consumer.
func (p *Partition[R, X]) InFlight() int { return p.inFlight }

type entry[R, X any] struct {
	p        *Partition[R, X]
	rec      R
	off      int64
	size     int64 // the record's key, value and headers
	attempts int
	cur      *Delivery[R, X] // the delivery out now; nil when not out
}

// Delivery is one delivery of a record: the Message's Handle. A settle is
// honoured only for the record's current delivery of a live partition.
type Delivery[R, X any] struct {
	d          *Dispatcher[R, X]
	e          *entry[R, X]
	Generation int32
	Partition  int32
	Offset     int64
}

// Errors are the source's own error values, which the Dispatcher returns.
type Errors struct {
	Foreign, NotInFlight, NoDeadLetterTopic, PartitionRevoked, DeadLetterFailed error
}

// Dispatcher is what both Kafka sources do between the client and the
// consumer: it queues each partition's records, serves Receive from the
// partitions in turn, and carries out Ack, Nack and DeadLetter against
// the partitions' trackers, dropping the settles of released partitions.
// The source fetches, commits and follows the group.
type Dispatcher[R, X any] struct {
	// ToMessage turns a record into the Message delivered.
	ToMessage func(r R, attempt int) *broker.Message
	// Produce writes r to the dead-letter topic; nil without one.
	Produce func(ctx context.Context, r R, reason, topic string, partition int32, offset int64) error
	// OnDone runs, under the lock, when one of p's records is done.
	OnDone func(p *Partition[R, X])
	// DeadLetterTopic names the dead-letter topic, for the metrics.
	DeadLetterTopic string
	Errs            Errors
	Tel             *Telemetry
	Hooks           Hooks
	Logger          *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	// maxHold bounds how long an unfinished record may hold its
	// partition's commit (LimitHold); 0: no bound.
	maxHold time.Duration

	mu      sync.Mutex
	bytes   int64              // fetched and not done, of the active partitions
	order   []*Partition[R, X] // dispatching, served in turn
	rr      int
	wake    chan struct{} // closed and replaced when messages arrive
	waiters int
	closed  bool
	settled chan struct{} // a message was settled: wakes a draining revoke
}

// Init readies d; call it once before use.
func (d *Dispatcher[R, X]) Init() {
	d.wake = make(chan struct{})
	d.settled = make(chan struct{}, 1)
}

// BytesLocked is the size of the records fetched and not done, over the
// partitions dispatched: what a byte bound on fetching is measured
// against.
func (d *Dispatcher[R, X]) BytesLocked() int64 { return d.bytes }

// EachLocked calls f for every partition dispatched.
func (d *Dispatcher[R, X]) EachLocked(f func(p *Partition[R, X])) {
	for _, p := range d.order {
		f(p)
	}
}

// Lock takes the lock that guards the partitions; the source keeps its own
// state under it too.
func (d *Dispatcher[R, X]) Lock() { d.mu.Lock() }

// Unlock releases the lock.
func (d *Dispatcher[R, X]) Unlock() { d.mu.Unlock() }

// CloseLocked makes Receive return broker.ErrSourceClosed from now on.
func (d *Dispatcher[R, X]) CloseLocked() {
	d.closed = true
	d.signalLocked()
}

// ClosedLocked reports whether CloseLocked was called.
func (d *Dispatcher[R, X]) ClosedLocked() bool { return d.closed }

// Settled receives when a message was settled, for a draining revoke.
func (d *Dispatcher[R, X]) Settled() <-chan struct{} { return d.settled }

// AddLocked starts dispatching ps.
func (d *Dispatcher[R, X]) AddLocked(ps ...*Partition[R, X]) { d.order = append(d.order, ps...) }

// EnqueueLocked queues r, of size bytes, at offset off of p, unless p is
// not active or the offset was tracked already (a refetch).
func (d *Dispatcher[R, X]) EnqueueLocked(p *Partition[R, X], off int64, r R, size int) bool {
	if p.State != Active || !p.Tr.AddAt(off, d.now()) {
		return false
	}
	p.bytes += int64(size)
	d.bytes += int64(size)
	p.queue = append(p.queue, &entry[R, X]{p: p, rec: r, off: off, size: int64(size)})
	d.signalLocked()
	return true
}

// StopLocked takes ps out of Receive's reach: they drain. What is queued
// is dropped, still unfinished in the tracker, so the commit stays below
// it and the next owner reads it again.
func (d *Dispatcher[R, X]) StopLocked(ps []*Partition[R, X]) {
	for _, p := range ps {
		if p.State == Active {
			p.State = Draining
		}
		// What no longer counts: the partition's records are either
		// dropped here or settle late, their memory the consumer's.
		d.bytes -= p.bytes
		p.bytes = 0
		p.queue = nil
		for e, t := range p.timers {
			t.Stop()
			delete(p.timers, e)
		}
	}
	d.order = slices.DeleteFunc(d.order, func(p *Partition[R, X]) bool { return p.State != Active })
	if len(d.order) > 0 {
		d.rr %= len(d.order)
	}
}

// InFlight counts the deliveries of ps out with the consumer.
func (d *Dispatcher[R, X]) InFlight(ps []*Partition[R, X]) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, p := range ps {
		n += p.inFlight
	}
	return n
}

// Drain waits until ps have nothing in flight, timeout passes or stop
// ends.
func (d *Dispatcher[R, X]) Drain(ps []*Partition[R, X], timeout time.Duration, stop <-chan struct{}) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for d.InFlight(ps) > 0 {
		select {
		case <-d.settled:
		case <-deadline.C:
			return
		case <-stop:
			return
		}
	}
}

// ReleaseLocked hands ps back: settles from now on are late. It returns
// how many messages were still in flight.
func (d *Dispatcher[R, X]) ReleaseLocked(ps []*Partition[R, X]) int {
	n := 0
	for _, p := range ps {
		p.State = Released
		n += p.inFlight
	}
	return n
}

// Lags yields every dispatching partition's commit lag, for
// [NewTelemetry].
func (d *Dispatcher[R, X]) Lags(yield func(lag int64, set metric.ObserveOption)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.order {
		if lag, ok := p.Tr.Lag(p.HWM); ok {
			yield(lag, p.LagSet)
		}
	}
}

func (d *Dispatcher[R, X]) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// HoldAges yields, for each dispatched partition with an unfinished
// record, how long its oldest has held the commit.
func (d *Dispatcher[R, X]) HoldAges(yield func(age time.Duration, set metric.ObserveOption)) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.order {
		if _, since, ok := p.Tr.Oldest(); ok {
			yield(now.Sub(since), p.LagSet)
		}
	}
}

// LimitHold bounds how long an unfinished record may hold its partition's
// commit: past it Receive fails with a *CommitHeldError.
func (d *Dispatcher[R, X]) LimitHold(max time.Duration) {
	d.mu.Lock()
	d.maxHold = max
	d.mu.Unlock()
}

// heldTooLongLocked is the error for the first partition whose commit an
// unfinished record has held past maxHold.
func (d *Dispatcher[R, X]) heldTooLongLocked() error {
	if d.maxHold <= 0 {
		return nil
	}
	now := d.now()
	for _, p := range d.order {
		if off, since, ok := p.Tr.Oldest(); ok && !since.IsZero() && now.Sub(since) > d.maxHold {
			return &CommitHeldError{Topic: p.Topic, Partition: p.ID, Offset: off, Held: now.Sub(since), Limit: d.maxHold}
		}
	}
	return nil
}

// CommitHeldError stops a consumer whose partition's commit an unfinished
// record has held too long: the records completed after it would expire
// before a replay from the held offset reached them, and run again.
type CommitHeldError struct {
	Topic     string
	Partition int32
	Offset    int64
	Held      time.Duration
	Limit     time.Duration
}

func (e *CommitHeldError) Error() string {
	return fmt.Sprintf("kafka: %s/%d: offset %d unfinished for %v, past %v (3/4 of the consumer's Retention): a replay from it would find later records' COMPLETED records expired and run them again; stopping instead. Find what holds the record (a stuck handler, a store outage) or raise Retention",
		e.Topic, e.Partition, e.Offset, e.Held.Round(time.Second), e.Limit)
}

// RetryClass makes the error stop the consumer, as a deployment fault.
func (e *CommitHeldError) RetryClass() retry.Class { return retry.Misconfigured }

// Receive returns up to max messages, waiting for one. Partitions are
// served in turn; each in offset order. Once a partition's commit has been
// held past the LimitHold bound it fails with a *CommitHeldError.
func (d *Dispatcher[R, X]) Receive(ctx context.Context, max int) ([]*broker.Message, error) {
	max = min(max, 1<<16)
	if max < 1 {
		max = 1
	}
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, broker.ErrSourceClosed
		}
		if err := d.heldTooLongLocked(); err != nil {
			d.mu.Unlock()
			return nil, err
		}
		if out := d.takeLocked(max); len(out) > 0 {
			d.mu.Unlock()
			return out, nil
		}
		wake := d.wake
		d.waiters++
		d.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			d.mu.Lock()
			if d.wake == wake {
				d.waiters--
			}
			d.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

func (d *Dispatcher[R, X]) signalLocked() {
	if d.waiters == 0 {
		return
	}
	close(d.wake)
	d.wake, d.waiters = make(chan struct{}), 0
}

// takeLocked takes up to max queued entries, one partition at a time in
// turn, so that a busy partition does not starve the others.
func (d *Dispatcher[R, X]) takeLocked(max int) []*broker.Message {
	n := len(d.order)
	if n == 0 {
		return nil
	}
	var out []*broker.Message
	now := time.Now()
	for len(out) < max {
		took := false
		for i := 0; i < n && len(out) < max; i++ {
			p := d.order[(d.rr+i)%n]
			if len(p.queue) == 0 {
				continue
			}
			e := p.queue[0]
			p.queue[0] = nil
			p.queue = p.queue[1:]
			e.attempts++
			dl := &Delivery[R, X]{d: d, e: e, Generation: p.Gen, Partition: p.ID, Offset: e.off}
			e.cur = dl
			p.inFlight++
			m := d.ToMessage(e.rec, e.attempts)
			m.ReceivedAt, m.Handle = now, dl
			out = append(out, m)
			took = true
		}
		if !took {
			break
		}
	}
	d.rr = (d.rr + 1) % n
	return out
}

func permanent(err error) error { return retry.WithClass(err, retry.Permanent) }

// currentLocked validates m's handle: it returns the delivery when m is
// this dispatcher's current delivery of a live partition; late reports a
// partition already released.
func (d *Dispatcher[R, X]) currentLocked(m *broker.Message) (dl *Delivery[R, X], late bool, err error) {
	dl, ok := m.Handle.(*Delivery[R, X])
	if !ok || dl == nil || dl.d != d {
		return nil, false, permanent(fmt.Errorf("%w: %s", d.Errs.Foreign, m.ID))
	}
	if dl.e.p.State == Released {
		return dl, true, nil
	}
	if dl.e.cur != dl {
		return nil, false, permanent(fmt.Errorf("%w: %s", d.Errs.NotInFlight, m.ID))
	}
	return dl, false, nil
}

// settledLocked takes dl's entry out of flight and wakes who waits on it.
func (d *Dispatcher[R, X]) settledLocked(dl *Delivery[R, X], done bool) {
	e := dl.e
	p := e.p
	e.cur = nil
	p.inFlight--
	if done {
		if p.State != Released && p.bytes >= e.size {
			p.bytes -= e.size
			d.bytes -= e.size
		}
		p.Tr.MarkDone(e.off)
		if d.OnDone != nil {
			d.OnDone(p)
		}
	}
	select {
	case d.settled <- struct{}{}:
	default:
	}
}

func (d *Dispatcher[R, X]) late(ctx context.Context, dl *Delivery[R, X]) {
	topic := dl.e.p.Topic
	d.Tel.Late(ctx, topic)
	for _, h := range d.Hooks.LateAck {
		h.OnKafkaLateAck(ctx, topic, dl.Partition, dl.Offset, dl.Generation)
	}
	d.Logger.Debug("late settle dropped", "topic", topic, "partition", dl.Partition,
		"offset", dl.Offset, "generation", dl.Generation)
}

// Ack marks the message done in its partition's tracker. An ack after its
// partition was released is dropped and returns nil.
func (d *Dispatcher[R, X]) Ack(ctx context.Context, m *broker.Message) error {
	d.mu.Lock()
	dl, late, err := d.currentLocked(m)
	if err != nil || late {
		d.mu.Unlock()
		if late {
			d.late(ctx, dl)
		}
		return err
	}
	d.settledLocked(dl, true)
	d.mu.Unlock()
	return nil
}

// Nack redelivers the message in place after delay, with Attempt+1; its
// offset is held meanwhile. On a revoked partition it is not redelivered.
func (d *Dispatcher[R, X]) Nack(_ context.Context, m *broker.Message, delay time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	dl, late, err := d.currentLocked(m)
	if err != nil || late {
		return err
	}
	d.settledLocked(dl, false)
	e, p := dl.e, dl.e.p
	if p.State != Active {
		return nil
	}
	if delay <= 0 {
		d.requeueLocked(e)
		return nil
	}
	p.timers[e] = time.AfterFunc(delay, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, ok := p.timers[e]; ok {
			delete(p.timers, e)
			if p.State == Active {
				d.requeueLocked(e)
			}
		}
	})
	return nil
}

// requeueLocked puts e back in its partition's queue at its offset, so a
// redelivery does not fall behind its successors still queued.
func (d *Dispatcher[R, X]) requeueLocked(e *entry[R, X]) {
	p := e.p
	i, _ := slices.BinarySearchFunc(p.queue, e.off, func(x *entry[R, X], off int64) int {
		switch {
		case x.off < off:
			return -1
		case x.off > off:
			return 1
		}
		return 0
	})
	p.queue = slices.Insert(p.queue, i, e)
	d.signalLocked()
}

// DeadLetter produces the message to the dead-letter topic through
// Produce, then settles it. Without Produce, or if the produce fails, the
// message stays in flight and an error says why.
func (d *Dispatcher[R, X]) DeadLetter(ctx context.Context, m *broker.Message, reason string) error {
	if d.Produce == nil {
		return permanent(fmt.Errorf("%w: %s", d.Errs.NoDeadLetterTopic, m.ID))
	}
	d.mu.Lock()
	dl, late, err := d.currentLocked(m)
	if err == nil && late {
		err = fmt.Errorf("%w: %s", d.Errs.PartitionRevoked, m.ID)
	}
	if err != nil {
		d.mu.Unlock()
		return err
	}
	rec, topic := dl.e.rec, dl.e.p.Topic
	d.mu.Unlock()

	err = d.Produce(ctx, rec, reason, topic, dl.Partition, dl.Offset)
	d.Tel.DeadLettered(ctx, d.DeadLetterTopic, err)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", d.Errs.DeadLetterFailed, m.ID, err)
	}
	for _, h := range d.Hooks.DeadLetter {
		h.OnKafkaDeadLetter(ctx, topic, dl.Partition, dl.Offset, reason)
	}
	d.mu.Lock()
	_, late, err = d.currentLocked(m)
	if err == nil && !late {
		d.settledLocked(dl, true)
	}
	d.mu.Unlock()
	if late {
		// Produced, but the partition went meanwhile: its new owner will
		// see the message again and decide again.
		d.late(ctx, dl)
	}
	return err
}
