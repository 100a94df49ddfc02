package kafkacore

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/kafkagroup"
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
// source's own per-partition state, which the source guards.
//
// Each partition has its own lock. A settle takes only its message's
// partition's, so workers settling messages of different partitions never
// wait on each other; Receive takes each partition's in turn, briefly.
type Partition[R, X any] struct {
	Topic  string
	ID     int32
	Gen    int32                // the generation (or member epoch) that assigned it
	LagSet metric.ObserveOption // the commit-lag gauge's attributes
	X      X

	sync.Mutex // guards the fields below; the source reads State, Tr and HWM under it
	State      PartState
	Tr         *Tracker
	HWM        int64 // highest log end offset a fetch reported

	bytes    int64          // of the records queued or in flight, while active
	queue    []*entry[R, X] // fetched or redelivered, awaiting Receive, by offset
	inFlight int            // delivered, not settled
	timers   map[*entry[R, X]]*time.Timer
}

// NewPartition is an active partition of a new assignment, resuming after
// committed (-1: none known).
func NewPartition[R, X any](topic string, id, gen int32, committed int64, tel *Telemetry) *Partition[R, X] {
	return &Partition[R, X]{Topic: topic, ID: id, Gen: gen, Tr: NewTracker(committed), LagSet: tel.PartitionSet(topic, id),
		timers: map[*entry[R, X]]*time.Timer{}}
}

type entry[R, X any] struct {
	p        *Partition[R, X]
	rec      R
	off      int64
	size     int64 // the record's key, value and headers
	attempts int
	cur      *Delivery[R, X] // the delivery out now; nil when not out
	// first is the first delivery, allocated with the entry: a record
	// delivered once, the usual case, costs one allocation in all.
	first Delivery[R, X]
}

// Delivery is one delivery of a record, with the Message delivered, whose
// Handle it is. A settle is honoured only for the record's current
// delivery of a live partition.
type Delivery[R, X any] struct {
	msg     broker.Message
	d       *Dispatcher[R, X]
	e       *entry[R, X]
	attempt int
}

// Dispatcher is what both Kafka sources do between the client and the
// consumer: it queues each partition's records, serves Receive from the
// partitions in turn, and carries out Ack, Nack and DeadLetter against
// the partitions' trackers, dropping the settles of released partitions.
// The source fetches, commits and follows the group.
type Dispatcher[R, X any] struct {
	// ToMessage sets m to the Message for a record's delivery; the
	// Dispatcher then sets its ReceivedAt and Handle.
	ToMessage func(m *broker.Message, r R, attempt int)
	// Produce writes r to the dead-letter topic; nil without one.
	Produce func(ctx context.Context, r R, reason, topic string, partition int32, offset int64) error
	// OnDone runs, outside any lock, after one of p's records is done;
	// unfinished is what p then had unfinished.
	OnDone func(p *Partition[R, X], unfinished int)
	// DeadLetterTopic names the dead-letter topic, for the metrics.
	DeadLetterTopic string
	Tel             *Telemetry
	Hooks           Hooks
	Logger          *slog.Logger
	// Status passes the Source's reports of its brokers to the consumer
	// (Methods.Attach).
	Status Reporter
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	maxHold atomic.Int64 // LimitHold's bound, in nanoseconds; 0: none
	bytes   atomic.Int64 // queued or in flight, of the active partitions
	next    atomic.Uint32

	// parts are the active partitions, replaced whole under mu on a change
	// so that Receive reads them without a lock.
	mu        sync.Mutex
	parts     atomic.Pointer[[]*Partition[R, X]]
	ready     chan struct{} // holds a token while a queue may hold a message
	closed    chan struct{}
	closeOnce sync.Once
	settled   chan struct{} // a draining partition's message was settled
}

// Init readies d; call it once before use.
func (d *Dispatcher[R, X]) Init() {
	d.ready = make(chan struct{}, 1)
	d.closed = make(chan struct{})
	d.settled = make(chan struct{}, 1)
	d.parts.Store(&[]*Partition[R, X]{})
}

// Bytes is the size of the records queued or in flight, over the active
// partitions: what a byte bound on fetching is measured against.
func (d *Dispatcher[R, X]) Bytes() int64 { return d.bytes.Load() }

// Partitions are the partitions dispatched now; the slice is not to be
// changed.
func (d *Dispatcher[R, X]) Partitions() []*Partition[R, X] { return *d.parts.Load() }

// eachLocked calls f for every partition dispatched, under its lock.
func (d *Dispatcher[R, X]) eachLocked(f func(p *Partition[R, X])) {
	for _, p := range d.Partitions() {
		p.Lock()
		f(p)
		p.Unlock()
	}
}

// Close makes Receive return broker.ErrSourceClosed from now on.
func (d *Dispatcher[R, X]) Close() { d.closeOnce.Do(func() { close(d.closed) }) }

// Closed reports whether Close was called.
func (d *Dispatcher[R, X]) Closed() bool {
	select {
	case <-d.closed:
		return true
	default:
		return false
	}
}

// Add starts dispatching ps.
func (d *Dispatcher[R, X]) Add(ps ...*Partition[R, X]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	next := append(slices.Clone(d.Partitions()), ps...)
	d.parts.Store(&next)
}

// EnqueueLocked queues r, of size bytes, at offset off of p, fetched at
// at, unless p is not active or the offset was tracked already (a
// refetch). The caller holds p's lock. One at serves a whole fetch: the
// hold it dates is bounded in hours.
func (d *Dispatcher[R, X]) EnqueueLocked(p *Partition[R, X], off int64, r R, size int, at time.Time) bool {
	if p.State != Active || !p.Tr.AddAt(off, at) {
		return false
	}
	p.bytes += int64(size)
	d.bytes.Add(int64(size))
	p.queue = append(p.queue, &entry[R, X]{p: p, rec: r, off: off, size: int64(size)})
	d.signal()
	return true
}

// signal wakes a waiting Receive, or the next one to wait.
func (d *Dispatcher[R, X]) signal() {
	select {
	case d.ready <- struct{}{}:
	default:
	}
}

// Stop takes ps out of Receive's reach: they drain. What is queued is
// dropped, still unfinished in the tracker, so the commit stays below it
// and the next owner reads it again.
func (d *Dispatcher[R, X]) Stop(ps []*Partition[R, X]) {
	for _, p := range ps {
		p.Lock()
		if p.State == Active {
			p.State = Draining
			// What no longer counts: the partition's records are either
			// dropped here or settle late, their memory the consumer's.
			d.bytes.Add(-p.bytes)
			p.bytes = 0
		}
		p.queue = nil
		for e, t := range p.timers {
			t.Stop()
			delete(p.timers, e)
		}
		p.Unlock()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	next := slices.DeleteFunc(slices.Clone(d.Partitions()), func(p *Partition[R, X]) bool { return slices.Contains(ps, p) })
	d.parts.Store(&next)
}

// InFlight counts the deliveries of ps out with the consumer.
func (d *Dispatcher[R, X]) InFlight(ps []*Partition[R, X]) int {
	n := 0
	for _, p := range ps {
		p.Lock()
		n += p.inFlight
		p.Unlock()
	}
	return n
}

// Drain waits until ps, stopped, have nothing in flight, timeout passes or
// stop ends.
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

// Release hands ps back: settles from now on are late. It returns how
// many messages were still in flight.
func (d *Dispatcher[R, X]) Release(ps []*Partition[R, X]) int {
	n := 0
	for _, p := range ps {
		p.Lock()
		p.State = Released
		n += p.inFlight
		p.Unlock()
	}
	return n
}

// Lags yields every dispatching partition's commit lag, for
// [NewTelemetry].
func (d *Dispatcher[R, X]) Lags(yield func(lag int64, set metric.ObserveOption)) {
	d.eachLocked(func(p *Partition[R, X]) {
		if lag, ok := p.Tr.Lag(p.HWM); ok {
			yield(lag, p.LagSet)
		}
	})
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
	d.eachLocked(func(p *Partition[R, X]) {
		if _, since, ok := p.Tr.Oldest(); ok {
			yield(now.Sub(since), p.LagSet)
		}
	})
}

// Offsets returns, by topic and partition, the offset to commit of each
// of ps that moved forward and is not released, as the client takes it:
// key makes the partition's key, val the offset's value.
func Offsets[R, X any, K comparable, V any](ps []*Partition[R, X], key func(int32) K, val func(int64) V) map[string]map[K]V {
	offsets := map[string]map[K]V{}
	for _, p := range ps {
		p.Lock()
		off, ok := p.Tr.ToCommit()
		ok = ok && p.State != Released
		p.Unlock()
		if ok {
			if offsets[p.Topic] == nil {
				offsets[p.Topic] = map[K]V{}
			}
			offsets[p.Topic][key(p.ID)] = val(off)
		}
	}
	return offsets
}

// LimitHold bounds how long an unfinished record may hold its partition's
// commit: past it Receive fails with a *kafkagroup.CommitHeldError.
func (d *Dispatcher[R, X]) LimitHold(max time.Duration) { d.maxHold.Store(int64(max)) }

// heldTooLong is the error for the first partition whose commit an
// unfinished record has held past LimitHold's bound.
func (d *Dispatcher[R, X]) heldTooLong() error {
	limit := time.Duration(d.maxHold.Load())
	if limit <= 0 {
		return nil
	}
	now := d.now()
	var err error
	d.eachLocked(func(p *Partition[R, X]) {
		if off, since, ok := p.Tr.Oldest(); ok && err == nil && !since.IsZero() && now.Sub(since) > limit {
			err = &kafkagroup.CommitHeldError{Topic: p.Topic, Partition: p.ID, Offset: off, Held: now.Sub(since), Limit: limit}
		}
	})
	return err
}

// Receive returns up to max messages, waiting for one. Partitions are
// served in turn; each in offset order. Once a partition's commit has been
// held past the LimitHold bound it fails with a *kafkagroup.CommitHeldError.
// A caller whose ctx is over is handed nothing, even with messages
// queued: it would hold them unsettled until their partition is revoked.
func (d *Dispatcher[R, X]) Receive(ctx context.Context, max int) ([]*broker.Message, error) {
	max = min(max, 1<<16)
	if max < 1 {
		max = 1
	}
	for {
		if d.Closed() {
			return nil, broker.ErrSourceClosed
		}
		if err := ctx.Err(); err != nil {
			// The wake-up this caller may have taken is handed on: another
			// Receive, still live, may wait for the message that sent it.
			d.signal()
			return nil, err
		}
		if err := d.heldTooLong(); err != nil {
			return nil, err
		}
		if out := d.take(max); len(out) > 0 {
			return out, nil
		}
		select {
		case <-d.ready:
		case <-d.closed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// take takes up to limit queued messages, an even share from each
// partition in turn, starting one partition further at each call, so that a
// busy partition does not starve the others. Each pass takes each
// partition's lock once.
func (d *Dispatcher[R, X]) take(limit int) []*broker.Message {
	ps := d.Partitions()
	n := len(ps)
	if n == 0 {
		return nil
	}
	first := int(d.next.Add(1) % uint32(n))
	var taken []*Delivery[R, X]
	left := false // a queue still holds messages
	for len(taken) < limit {
		before := len(taken)
		share := max(1, (limit-len(taken))/n)
		left = false
		for i := range n {
			p := ps[(first+i)%n]
			p.Lock()
			taken = takeLocked(d, p, taken, min(share, limit-len(taken)))
			left = left || (p.State == Active && len(p.queue) > 0)
			p.Unlock()
		}
		if len(taken) == before || !left {
			break
		}
	}
	if left {
		d.signal() // for another Receive waiting meanwhile
	}
	// The messages are built outside the partitions' locks.
	now := time.Now()
	out := make([]*broker.Message, len(taken))
	for i, dl := range taken {
		m := &dl.msg
		d.ToMessage(m, dl.e.rec, dl.attempt)
		m.ReceivedAt, m.Handle = now, dl
		out[i] = m
	}
	return out
}

// takeLocked moves up to k of active p's queued entries into flight.
func takeLocked[R, X any](d *Dispatcher[R, X], p *Partition[R, X], taken []*Delivery[R, X], k int) []*Delivery[R, X] {
	if p.State != Active {
		return taken
	}
	k = min(k, len(p.queue))
	for _, e := range p.queue[:k] {
		e.attempts++
		if e.attempts == 1 {
			e.cur = &e.first
		} else {
			// A redelivery is a new Message: the consumer may still hold
			// the one before.
			e.cur = new(Delivery[R, X])
		}
		e.cur.d, e.cur.e, e.cur.attempt = d, e, e.attempts
		taken = append(taken, e.cur)
	}
	clear(p.queue[:k])
	p.queue = p.queue[k:]
	p.inFlight += k
	return taken
}

func permanent(err error) error { return retry.WithClass(err, retry.Permanent) }

// delivery is m's handle, when m is this dispatcher's.
func (d *Dispatcher[R, X]) delivery(m *broker.Message) (*Delivery[R, X], error) {
	dl, ok := m.Handle.(*Delivery[R, X])
	if !ok || dl == nil || dl.d != d {
		return nil, permanent(fmt.Errorf("%w: %s", kafkagroup.ErrForeignMessage, m.ID))
	}
	return dl, nil
}

// currentLocked checks, under the partition's lock, that dl is its
// record's current delivery; late reports a partition already released.
func (d *Dispatcher[R, X]) currentLocked(dl *Delivery[R, X], id string) (late bool, err error) {
	if dl.e.p.State == Released {
		return true, nil
	}
	if dl.e.cur != dl {
		return false, permanent(fmt.Errorf("%w: %s", kafkagroup.ErrNotInFlight, id))
	}
	return false, nil
}

// settledLocked takes dl's entry out of flight, marking it done in the
// tracker when done, and wakes a drain waiting on it. It returns what the
// partition has unfinished.
func (d *Dispatcher[R, X]) settledLocked(dl *Delivery[R, X], done bool) int {
	e := dl.e
	p := e.p
	e.cur = nil
	p.inFlight--
	if done {
		if p.State == Active {
			p.bytes -= e.size
			d.bytes.Add(-e.size)
		}
		p.Tr.MarkDone(e.off)
	}
	if p.State == Draining {
		select {
		case d.settled <- struct{}{}:
		default:
		}
	}
	return p.Tr.Unfinished()
}

func (d *Dispatcher[R, X]) late(ctx context.Context, dl *Delivery[R, X]) {
	p := dl.e.p
	d.Tel.Late(ctx, p.Topic)
	for _, h := range d.Hooks.LateAck {
		h.OnKafkaLateAck(ctx, p.Topic, p.ID, dl.e.off, p.Gen)
	}
	d.Logger.Debug("late settle dropped", "topic", p.Topic, "partition", p.ID, "offset", dl.e.off, "generation", p.Gen)
}

// Ack marks the message done in its partition's tracker; the next commit
// of the partition carries it. An ack after its partition was released is
// dropped and returns nil.
func (d *Dispatcher[R, X]) Ack(ctx context.Context, m *broker.Message) error {
	dl, err := d.delivery(m)
	if err != nil {
		return err
	}
	p := dl.e.p
	p.Lock()
	late, err := d.currentLocked(dl, m.ID)
	if err != nil || late {
		p.Unlock()
		if late {
			d.late(ctx, dl)
		}
		return err
	}
	unfinished := d.settledLocked(dl, true)
	p.Unlock()
	if d.OnDone != nil {
		d.OnDone(p, unfinished)
	}
	return nil
}

// Nack redelivers the message in place after delay, with Attempt+1; its
// offset is held meanwhile. On a revoked partition it is not redelivered.
func (d *Dispatcher[R, X]) Nack(_ context.Context, m *broker.Message, delay time.Duration) error {
	dl, err := d.delivery(m)
	if err != nil {
		return err
	}
	e, p := dl.e, dl.e.p
	p.Lock()
	defer p.Unlock()
	if late, err := d.currentLocked(dl, m.ID); err != nil || late {
		return err
	}
	d.settledLocked(dl, false)
	if p.State != Active {
		return nil
	}
	if delay <= 0 {
		d.requeueLocked(e)
		return nil
	}
	p.timers[e] = time.AfterFunc(delay, func() {
		p.Lock()
		defer p.Unlock()
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
		return cmp.Compare(x.off, off)
	})
	p.queue = slices.Insert(p.queue, i, e)
	d.signal()
}

// DeadLetter produces the message to the dead-letter topic through
// Produce, then settles it. Without Produce, or if the produce fails, the
// message stays in flight and an error says why. A dead letter of a
// partition released before the call is dropped, as a late ack is, and
// returns nil: the partition's new owner sees the message again and
// decides again (an error would tell the consumer that no destination
// takes the copy, and it would keep the message out of the dead-letter
// topic for good).
func (d *Dispatcher[R, X]) DeadLetter(ctx context.Context, m *broker.Message, reason string) error {
	if d.Produce == nil {
		return permanent(fmt.Errorf("%w: %s", kafkagroup.ErrNoDeadLetterTopic, m.ID))
	}
	dl, err := d.delivery(m)
	if err != nil {
		return err
	}
	p := dl.e.p
	p.Lock()
	late, err := d.currentLocked(dl, m.ID)
	p.Unlock()
	if err != nil {
		return err
	}
	if late {
		d.late(ctx, dl)
		return nil
	}

	err = d.Produce(ctx, dl.e.rec, reason, p.Topic, p.ID, dl.e.off)
	d.Tel.DeadLettered(ctx, d.DeadLetterTopic, err)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", kafkagroup.ErrDeadLetterFailed, m.ID, err)
	}
	for _, h := range d.Hooks.DeadLetter {
		h.OnKafkaDeadLetter(ctx, p.Topic, p.ID, dl.e.off, reason)
	}
	p.Lock()
	late, err = d.currentLocked(dl, m.ID)
	unfinished := 0
	if err == nil && !late {
		unfinished = d.settledLocked(dl, true)
	}
	p.Unlock()
	if late {
		// Produced, but the partition went meanwhile: its new owner will
		// see the message again and decide again.
		d.late(ctx, dl)
		return nil
	}
	if err == nil && d.OnDone != nil {
		d.OnDone(p, unfinished)
	}
	return err
}
