package kafkacore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// Batching is what both sources' batch mode shares, whatever the client:
// taking a partition's offset row on assignment, the feed of its records
// to the batch.Runner, its dead letters and group commits, and the
// Runner's run. R is the client's record.
type Batching[R any] struct {
	Runner *batch.Runner
	Group  string
	// ToMessage makes a record into a Message (the source's own).
	ToMessage func(m *broker.Message, r R, attempt int)
	// Produce produces a dead letter; nil without a DeadLetterTopic.
	Produce         func(ctx context.Context, orig R, reason, topic string, partition int32, offset int64) error
	DeadLetterTopic string
	// Queue bounds the records fetched for a partition and not yet taken
	// by its Runner.
	Queue  int
	Hooks  Hooks
	Tel    *Telemetry
	Logger *slog.Logger
}

// acquireRetry bounds the wait between two tries of Acquire.
const acquireRetry = 5 * time.Second

// Acquire takes the partition's offset row for member, trying again,
// backing off, while the Store fails, until ctx ends: a partition whose
// row cannot be read must not start from the group's offset instead.
func (b *Batching[R]) Acquire(ctx context.Context, topic string, id int32, member string) (batch.Lease, error) {
	p := batch.Partition{Group: b.Group, Topic: topic, Partition: id}
	for failures := 0; ; failures++ {
		l, err := b.Runner.Acquire(ctx, p, member)
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			return batch.Lease{}, ctx.Err()
		}
		delay := min(100*time.Millisecond<<min(failures, 6), acquireRetry)
		b.Logger.Warn("kafka batch: taking the partition's offset row failed", "partition", p.String(), "error", err.Error(), "retry_in", delay)
		select {
		case <-ctx.Done():
			return batch.Lease{}, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// Feed is one assigned partition's batch.Feed: commit commits the group's
// offset of it.
func (b *Batching[R]) Feed(lease batch.Lease, commit func(ctx context.Context, next int64) error) *BatchFeed[R] {
	return &BatchFeed[R]{b: b, lease: lease, commit: commit,
		ch: make(chan *broker.Message, b.Queue), done: make(chan struct{})}
}

// Run runs the Runner over f until ctx ends or the partition moved, and
// says which in the log. Pushes to f are dropped from then on.
func (b *Batching[R]) Run(ctx context.Context, f *BatchFeed[R]) {
	defer close(f.done)
	err := b.Runner.Run(ctx, f.lease, f)
	switch {
	case errors.Is(err, batch.ErrFenced):
		b.Logger.Warn("kafka batch: the partition moved to another member; this member stops serving it",
			"partition", f.lease.Partition.String(), "token", f.lease.Token)
	case err != nil && ctx.Err() == nil:
		b.Logger.Error("kafka batch: the partition stopped", "partition", f.lease.Partition.String(), "error", err.Error())
	}
}

// BatchFeed is one assigned partition's records on their way to its
// Runner, which reads them through batch.Feed.
type BatchFeed[R any] struct {
	b      *Batching[R]
	lease  batch.Lease
	commit func(ctx context.Context, next int64) error
	ch     chan *broker.Message
	done   chan struct{} // closed once the Runner stopped
}

// Lease is the lease the partition was taken with.
func (f *BatchFeed[R]) Lease() batch.Lease { return f.lease }

// Push queues r, received at received, for the Runner, waiting for room.
// It returns false, and drops r, once the Runner stopped or ctx ended.
func (f *BatchFeed[R]) Push(ctx context.Context, r R, received time.Time) bool {
	return f.push(ctx, &broker.Message{}, r, received)
}

// PushAll queues the records of one fetch, received at received, in
// order, as Push does each: their messages are allocated together, one
// allocation for the fetch where Push makes one per record. It returns
// false once the Runner stopped or ctx ended, dropping the rest.
func (f *BatchFeed[R]) PushAll(ctx context.Context, rs []R, received time.Time) bool {
	ms := make([]broker.Message, len(rs))
	for i, r := range rs {
		if !f.push(ctx, &ms[i], r, received) {
			return false
		}
	}
	return true
}

func (f *BatchFeed[R]) push(ctx context.Context, m *broker.Message, r R, received time.Time) bool {
	f.b.ToMessage(m, r, 1)
	m.Handle = r
	m.ReceivedAt = received
	select {
	case <-f.done: // before a send the buffer might still take
		return false
	default:
	}
	select {
	case f.ch <- m:
		return true
	case <-f.done:
	case <-ctx.Done():
	}
	return false
}

// Stopped is closed once the Runner stopped.
func (f *BatchFeed[R]) Stopped() <-chan struct{} { return f.done }

// Records implements batch.Feed.
func (f *BatchFeed[R]) Records() <-chan *broker.Message { return f.ch }

// DeadLetter implements batch.Feed: the record goes to the source's
// dead-letter topic, as a per-message source's would, with the same
// headers, hooks and metrics.
func (f *BatchFeed[R]) DeadLetter(ctx context.Context, m *broker.Message, reason string) error {
	if f.b.Produce == nil {
		return fmt.Errorf("%w: %s", kafkagroup.ErrNoDeadLetterTopic, m.ID)
	}
	rec, ok := m.Handle.(R)
	if !ok {
		return fmt.Errorf("%w: %s", kafkagroup.ErrForeignMessage, m.ID)
	}
	o := m.Origin
	err := f.b.Produce(ctx, rec, reason, o.Destination, o.Partition, o.Offset)
	f.b.Tel.DeadLettered(ctx, f.b.DeadLetterTopic, err)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", kafkagroup.ErrDeadLetterFailed, m.ID, err)
	}
	for _, h := range f.b.Hooks.DeadLetter {
		h.OnKafkaDeadLetter(ctx, o.Destination, o.Partition, o.Offset, reason)
	}
	return nil
}

// CommitGroup implements batch.Feed, with the source's commit hooks and
// metrics.
func (f *BatchFeed[R]) CommitGroup(ctx context.Context, next int64) error {
	err := f.commit(ctx, next)
	f.b.Tel.Committed(ctx, err)
	p := f.lease.Partition
	if err != nil {
		err = fmt.Errorf("%w: %s: %w", kafkagroup.ErrCommitFailed, p, err)
		for _, h := range f.b.Hooks.CommitError {
			h.OnKafkaCommitError(ctx, -1, err)
		}
		return err
	}
	for _, h := range f.b.Hooks.Commit {
		h.OnKafkaCommit(ctx, p.Topic, p.Partition, next)
	}
	return nil
}
