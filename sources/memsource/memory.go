package memsource

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/configerr"
)

// Outgoing is a message to send.
type Outgoing struct {
	Key        string
	Body       []byte
	Attributes map[string]string
}

// DeadLetter is a dead-lettered message with its reason.
type DeadLetter struct {
	Message broker.Message
	Reason  string
}

// Option configures a Queue.
type Option interface{ apply(*Queue) }

type optionFunc func(*Queue)

func (f optionFunc) apply(q *Queue) { f(q) }

// VisibilityTimeout sets how long a delivery stays hidden before it is
// redelivered unless settled or extended (default 30s).
func VisibilityTimeout(d time.Duration) Option {
	return optionFunc(func(q *Queue) { q.visibility = d })
}

// Ordering makes the queue FIFO per key, like an SQS FIFO queue: a key
// has at most one message in flight, delivered in send order.
func Ordering(o broker.Ordering) Option {
	return optionFunc(func(q *Queue) { q.ordering = o })
}

// Queue is the destination. Sources read it; Send writes it.
//
// The deliveries in flight are spread over shards, each under a lock of
// its own, so that settling a delivery takes the queue's lock only when it
// changes what a receive may take (a key freed, a message back).
type Queue struct {
	name       string
	visibility time.Duration
	ordering   broker.Ordering

	mu         sync.Mutex
	seq        uint64
	ready      []*entry // by seq when ordered, else arrival
	delayed    []*entry
	keysBusy   map[string]int
	nextExpiry time.Time
	dead       []DeadLetter
	wake       chan struct{} // closed and replaced when state changes and someone waits
	waiters    int

	flight [flightShards]flightShard // by entry seq; locked after mu
	acked  atomic.Int64
}

const flightShards = 16

// flightShard holds some deliveries in flight. An entry's token,
// visibleAt and owner are guarded by its shard's lock while it is in
// flight.
type flightShard struct {
	mu   sync.Mutex
	held map[*entry]struct{}
	_    [64]byte // apart from the next shard's lock
}

func (q *Queue) flightOf(e *entry) *flightShard { return &q.flight[e.seq%flightShards] }

type entry struct {
	id        string
	seq       uint64
	out       Outgoing
	attempts  int
	token     uint64 // changes on every delivery, so stale settles are refused
	visibleAt time.Time
	owner     *Source
}

// ErrInvalidConfig wraps every configuration error of this package; it
// is the ErrInvalidConfig of every onceq package.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// NewQueue makes an empty queue. Its name is the Destination a Sender
// sends to it: an empty one, which no outgoing message may name, is
// refused with an error wrapping ErrInvalidConfig.
func NewQueue(name string, opts ...Option) (*Queue, error) {
	if name == "" {
		return nil, fmt.Errorf("memsource: %w: NewQueue: an empty name (the Destination a Sender sends to)", ErrInvalidConfig)
	}
	q := &Queue{name: name, visibility: 30 * time.Second, keysBusy: map[string]int{}, wake: make(chan struct{})}
	for i := range q.flight {
		q.flight[i].held = map[*entry]struct{}{}
	}
	for _, o := range opts {
		if o != nil {
			o.apply(q)
		}
	}
	return q, nil
}

// Send enqueues a message.
func (q *Queue) Send(_ context.Context, m Outgoing) error {
	q.mu.Lock()
	q.seq++
	q.ready = append(q.ready, &entry{id: q.name + "-" + strconv.FormatUint(q.seq, 10), seq: q.seq, out: m})
	q.signalLocked()
	q.mu.Unlock()
	return nil
}

// Source returns a new reader of the queue.
func (q *Queue) Source() *Source { return &Source{q: q} }

// Stats is a snapshot of the queue.
type Stats struct {
	Ready, Delayed, InFlight, Acked, DeadLettered int
}

// Stats reports what the queue holds.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := Stats{Ready: len(q.ready), Delayed: len(q.delayed), Acked: int(q.acked.Load()), DeadLettered: len(q.dead)}
	for i := range q.flight {
		fs := &q.flight[i]
		fs.mu.Lock()
		st.InFlight += len(fs.held)
		fs.mu.Unlock()
	}
	return st
}

// DeadLetters returns what has been dead-lettered.
func (q *Queue) DeadLetters() []DeadLetter {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.dead)
}

func (q *Queue) signalLocked() {
	if q.waiters == 0 {
		return
	}
	close(q.wake)
	q.wake = make(chan struct{})
}

// insertReadyLocked puts e back among the ready. Ordered queues keep send
// order, so a retried head stays ahead of its successors.
func (q *Queue) insertReadyLocked(e *entry) {
	if q.ordering == broker.Unordered {
		q.ready = append(q.ready, e)
		return
	}
	i, _ := slices.BinarySearchFunc(q.ready, e.seq, func(x *entry, s uint64) int { return cmpUint(x.seq, s) })
	q.ready = slices.Insert(q.ready, i, e)
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// takeBackLocked takes out of flight, under q.mu, the deliveries for
// which give holds, and frees their keys.
func (q *Queue) takeBackLocked(give func(e *entry) bool) []*entry {
	var out []*entry
	for i := range q.flight {
		fs := &q.flight[i]
		fs.mu.Lock()
		for e := range fs.held {
			if give(e) {
				delete(fs.held, e)
				e.owner = nil
				out = append(out, e)
			}
		}
		fs.mu.Unlock()
	}
	for _, e := range out {
		q.freeKeyLocked(e)
	}
	return out
}

// freeKeyLocked lets e's key be delivered again, once e is out of flight.
func (q *Queue) freeKeyLocked(e *entry) {
	if q.ordering != broker.Unordered {
		if n := q.keysBusy[e.out.Key] - 1; n > 0 {
			q.keysBusy[e.out.Key] = n
		} else {
			delete(q.keysBusy, e.out.Key)
		}
	}
}

// promoteLocked moves due delayed entries and expired deliveries back to
// ready, and returns when the next such change is due (zero if none).
func (q *Queue) promoteLocked(now time.Time) time.Time {
	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	kept := q.delayed[:0]
	for _, e := range q.delayed {
		if !now.Before(e.visibleAt) {
			q.insertReadyLocked(e)
		} else {
			kept = append(kept, e)
			earliest(e.visibleAt)
		}
	}
	clear(q.delayed[len(kept):])
	q.delayed = kept
	if !q.nextExpiry.IsZero() && !now.Before(q.nextExpiry) {
		q.nextExpiry = time.Time{}
		expired := q.takeBackLocked(func(e *entry) bool {
			if !now.Before(e.visibleAt) {
				return true
			}
			if q.nextExpiry.IsZero() || e.visibleAt.Before(q.nextExpiry) {
				q.nextExpiry = e.visibleAt
			}
			return false
		})
		for _, e := range expired {
			q.insertReadyLocked(e)
		}
	}
	if !q.nextExpiry.IsZero() {
		earliest(q.nextExpiry)
	}
	return next
}

// Source reads a Queue. It implements broker.Source.
type Source struct {
	q      *Queue
	closed bool // guarded by q.mu
}

type handle struct {
	e     *entry
	token uint64
}

type delivery struct {
	m broker.Message
	h handle
}

// Receive implements broker.Source.
func (s *Source) Receive(ctx context.Context, max int) ([]*broker.Message, error) {
	if max <= 0 {
		max = 1
	}
	q := s.q
	for {
		q.mu.Lock()
		if s.closed {
			q.mu.Unlock()
			return nil, broker.ErrSourceClosed
		}
		now := time.Now()
		next := q.promoteLocked(now)
		msgs := s.takeLocked(now, max)
		if len(msgs) > 0 {
			q.mu.Unlock()
			return msgs, nil
		}
		wake := q.wake
		q.waiters++
		q.mu.Unlock()
		var timer *time.Timer
		var fire <-chan time.Time
		if !next.IsZero() {
			timer = time.NewTimer(time.Until(next))
			fire = timer.C
		}
		var err error
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		q.mu.Lock()
		q.waiters--
		q.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

func (s *Source) takeLocked(now time.Time, max int) []*broker.Message {
	q := s.q
	var msgs []*broker.Message
	// The messages of one take and their handles share one allocation.
	var ds []delivery
	ordered := q.ordering != broker.Unordered
	kept := q.ready[:0]
	for i, e := range q.ready {
		if len(msgs) == max {
			if len(kept) == 0 {
				// Everything before i was taken: drop the prefix instead of
				// copying the whole rest of the queue down on every take.
				clear(q.ready[:i])
				q.ready = q.ready[i:]
				return msgs
			}
			kept = append(kept, q.ready[i:]...)
			break
		}
		if ordered && q.keysBusy[e.out.Key] > 0 {
			kept = append(kept, e)
			continue
		}
		if ordered {
			q.keysBusy[e.out.Key]++
		}
		e.attempts++
		fs := q.flightOf(e)
		fs.mu.Lock()
		e.token++
		e.owner = s
		e.visibleAt = now.Add(q.visibility)
		fs.held[e] = struct{}{}
		token := e.token
		fs.mu.Unlock()
		if q.nextExpiry.IsZero() || now.Add(q.visibility).Before(q.nextExpiry) {
			q.nextExpiry = now.Add(q.visibility)
		}
		if msgs == nil {
			n := min(max, len(q.ready)-i)
			msgs = make([]*broker.Message, 0, n)
			ds = make([]delivery, n)
		}
		d := &ds[len(msgs)]
		d.h = handle{e, token}
		d.m = broker.Message{
			ID:          e.id,
			OrderingKey: e.out.Key,
			Body:        e.out.Body,
			Attributes:  e.out.Attributes,
			Deliveries:  e.attempts,
			Origin:      broker.Origin{System: "memory", Destination: q.name},
			ReceivedAt:  now,
			Handle:      &d.h,
		}
		msgs = append(msgs, &d.m)
	}
	clear(q.ready[len(kept):])
	q.ready = kept
	return msgs
}

// withHeld runs f on the live delivery of m under its flight shard's
// lock, or reports a stale one.
func (s *Source) withHeld(m *broker.Message, f func(fs *flightShard, e *entry)) error {
	h, ok := m.Handle.(*handle)
	if !ok {
		return fmt.Errorf("memsource: message %s was not delivered by this source", m.ID)
	}
	fs := s.q.flightOf(h.e)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if _, live := fs.held[h.e]; !live || h.e.token != h.token {
		return fmt.Errorf("memsource: delivery of %s is no longer held (visibility expired)", m.ID)
	}
	f(fs, h.e)
	return nil
}

// settle ends the live delivery of m: Ack, Nack and DeadLetter differ only
// in where place puts the entry once it is out of flight (nil: nowhere).
// The queue's lock is taken only when a receive may now take more: an
// unordered ack needs none.
func (s *Source) settle(m *broker.Message, place func(q *Queue, e *entry)) error {
	var e *entry
	err := s.withHeld(m, func(fs *flightShard, held *entry) {
		delete(fs.held, held)
		held.owner, e = nil, held
		if place == nil {
			s.q.acked.Add(1) // as it leaves flight: Stats never misses it
		}
	})
	if err != nil {
		return err
	}
	q := s.q
	if place == nil && q.ordering == broker.Unordered {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.freeKeyLocked(e)
	if place != nil {
		place(q, e)
	}
	q.signalLocked()
	return nil
}

// Ack implements broker.Source.
func (s *Source) Ack(_ context.Context, m *broker.Message) error {
	return s.settle(m, nil)
}

// Nack implements broker.Source.
func (s *Source) Nack(_ context.Context, m *broker.Message, delay time.Duration) error {
	return s.settle(m, func(q *Queue, e *entry) {
		if delay <= 0 {
			q.insertReadyLocked(e)
			return
		}
		e.visibleAt = time.Now().Add(delay)
		q.delayed = append(q.delayed, e)
	})
}

// DeadLetter implements broker.Source. The queue's dead-letter list always
// exists, so it fails only for a delivery no longer held.
func (s *Source) DeadLetter(_ context.Context, m *broker.Message, reason string) error {
	return s.settle(m, func(q *Queue, _ *entry) {
		q.dead = append(q.dead, DeadLetter{Message: *m, Reason: reason})
	})
}

// Capabilities declares the queue's visibility timeout and ordering; its
// dead-letter list always exists.
func (s *Source) Capabilities() broker.Capabilities {
	return broker.Capabilities{Ordering: s.q.ordering, DeliveryTimeout: s.q.visibility, DeadLetter: true}
}

// Attach implements broker.Source. The in-process queue neither logs,
// retries nor holds commits, so it needs nothing from the consumer.
func (s *Source) Attach(broker.Runtime) {}

// Check always succeeds: the queue is in this process.
func (s *Source) Check(context.Context) error { return nil }

// Extend implements broker.Source.
func (s *Source) Extend(_ context.Context, m *broker.Message, d time.Duration) error {
	return s.withHeld(m, func(_ *flightShard, e *entry) { e.visibleAt = time.Now().Add(d) })
}

// Close implements broker.Source. Deliveries it still holds become
// visible at once, as they would after a consumer-group rebalance.
func (s *Source) Close(context.Context) error {
	q := s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for _, e := range q.takeBackLocked(func(e *entry) bool { return e.owner == s }) {
		q.insertReadyLocked(e)
	}
	q.signalLocked()
	return nil
}
