package franzsource

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/sources/internal/kafkacore"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// BatchSource reads topics as a member of a consumer group in batch mode:
// each assigned partition's records go, in offset order, to a
// batch.Runner, which commits each batch's writes with the partition's
// next offset in one Store transaction. The Store is the truth: an
// assigned partition starts at its stored next offset (the group's commit
// or OffsetReset only when it has none), and the group's offset follows
// the Store's, for lag tools only.
//
// It takes the options New takes; those of per-message delivery
// (Ordering, MaxInFlightBytes, CommitInterval, RevokeTimeout) do nothing
// here, and MaxInFlightPerPartition bounds the records fetched for a
// partition and not yet taken by its Runner. A record that fails its
// attempts goes to the DeadLetterTopic, with the headers New's
// DeadLetter writes; without one it holds its partition.
type BatchSource struct {
	src  *Source
	core kafkacore.Batching[*kgo.Record]

	started atomic.Bool
	mu      sync.Mutex // guards parts, ctx and closed
	ctx     context.Context
	closed  bool
	parts   map[topicPartition]*batchPart
	wg      sync.WaitGroup // the partitions' runs
}

// batchPart is one assigned partition, for one assignment.
type batchPart struct {
	feed   *kafkacore.BatchFeed[*kgo.Record]
	cancel context.CancelFunc
}

// NewBatch makes a member of group reading topics from seeds in batch
// mode, its batches run by r. It checks what New checks. Run joins the
// group.
func NewBatch(ctx context.Context, seeds []string, group string, topics []string, r *batch.Runner, opts ...Option) (*BatchSource, error) {
	if r == nil {
		return nil, invalidOption("NewBatch: no batch.Runner")
	}
	b := &BatchSource{parts: map[topicPartition]*batchPart{}}
	src, err := newSource(ctx, seeds, group, topics, opts, func(s *Source) []kgo.Opt {
		return append(s.groupOpts(), kgo.AdjustFetchOffsetsFn(b.adjust),
			kgo.OnPartitionsRevoked(b.onRevoked), kgo.OnPartitionsLost(b.onRevoked))
	})
	if err != nil {
		return nil, err
	}
	b.src = src
	b.core = kafkacore.Batching[*kgo.Record]{Runner: r, Group: group, ToMessage: setMessage,
		Produce: src.d.Produce, DeadLetterTopic: src.cfg.DeadLetterTopic, Queue: src.cfg.MaxInFlight,
		Hooks: src.hooks, Tel: src.tel, Logger: src.cfg.Logger}
	return b, nil
}

// Run joins the group and serves the partitions assigned to this member
// until ctx ends; then it stops each partition's Runner (a batch whose
// handler finished still commits), leaves the group and releases what
// the source holds. It returns nil on a stop by ctx. A BatchSource runs
// once.
func (b *BatchSource) Run(ctx context.Context) error {
	if !b.started.CompareAndSwap(false, true) {
		return errors.New("franzsource: BatchSource.Run called twice")
	}
	b.mu.Lock()
	b.ctx = ctx
	b.mu.Unlock()
	b.src.cl.AddConsumeTopics(b.src.topics...)
	b.poll(ctx)
	b.mu.Lock()
	b.closed = true
	all := make([]*batchPart, 0, len(b.parts))
	for tp, p := range b.parts {
		all = append(all, p)
		delete(b.parts, tp)
	}
	b.mu.Unlock()
	for _, p := range all {
		p.cancel()
	}
	b.wg.Wait()
	return b.src.Close(context.WithoutCancel(ctx))
}

// Check is [Source.Check].
func (b *BatchSource) Check(ctx context.Context) error { return b.src.Check(ctx) }

// poll moves fetched records to their partitions' Runners until ctx ends.
// Under BlockRebalanceOnPoll no revoke runs between a poll and
// AllowRebalance, so each record goes to its partition's current Runner.
func (b *BatchSource) poll(ctx context.Context) {
	failures := 0
	for {
		fs := b.src.cl.PollRecords(ctx, maxPoll)
		if ctx.Err() != nil || fs.IsClientClosed() {
			b.src.cl.AllowRebalance()
			return
		}
		errs := 0
		fs.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			errs++
			b.src.cfg.Logger.Warn("franzsource: fetch failed", "topic", topic, "partition", partition, "error", err.Error())
		})
		received := time.Now() // one reading for the poll's records
		fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
			b.mu.Lock()
			p := b.parts[topicPartition{ftp.Topic, ftp.Partition}]
			b.mu.Unlock()
			if p == nil {
				return
			}
			// False once its Runner stopped (the partition moved), or at
			// Run's end: the rest is dropped.
			p.feed.PushAll(ctx, ftp.Records, received)
		})
		b.src.cl.AllowRebalance()
		if errs == 0 || fs.NumRecords() > 0 {
			failures = 0
			continue
		}
		failures++
		select {
		case <-ctx.Done():
		case <-time.After(min(100*time.Millisecond<<min(failures, 6), 5*time.Second)):
		}
	}
}

// adjust runs once the group assigned partitions, before they are
// fetched: it takes each one's offset row, starts its Runner, and makes
// the fetch start at the stored next offset (the group's commit, or the
// reset policy, only where there is no row).
func (b *BatchSource) adjust(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	member, gen := b.src.cl.GroupMetadata()
	assigned := map[string][]int32{}
	for topic, ps := range offsets {
		for id := range ps {
			lease, err := b.core.Acquire(ctx, topic, id, member)
			if err != nil {
				return nil, err
			}
			if lease.Next >= 0 {
				ps[id] = kgo.NewOffset().At(lease.Next).WithEpoch(-1)
			}
			if !b.start(topic, id, lease) {
				return nil, context.Canceled
			}
			assigned[topic] = append(assigned[topic], id)
		}
	}
	b.src.cfg.Logger.Info("franzsource: partitions assigned (batch mode)", "group", b.src.groupID, "generation", gen, "partitions", assigned)
	for _, h := range b.src.hooks.Rebalance {
		h.OnKafkaRebalance(ctx, kafkagroup.RebalanceEvent{Generation: gen, Partitions: assigned})
	}
	return offsets, nil
}

// start starts the Runner of a partition taken with lease; false once
// Run is stopping.
func (b *BatchSource) start(topic string, id int32, lease batch.Lease) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.ctx == nil {
		return false
	}
	tp := topicPartition{topic, id}
	if old := b.parts[tp]; old != nil {
		// Assigned again with no revoke between: the old lease is
		// fenced by the new one; its Runner stops.
		old.cancel()
	}
	feed := b.core.Feed(lease, func(ctx context.Context, next int64) error { return b.commitGroup(ctx, topic, id, next) })
	ctx, cancel := context.WithCancel(b.ctx)
	b.parts[tp] = &batchPart{feed: feed, cancel: cancel}
	b.wg.Go(func() {
		defer cancel()
		b.core.Run(ctx, feed)
	})
	return true
}

// onRevoked stops the revoked (or lost) partitions' Runners and waits for
// them: a batch whose handler finished commits, fenced if the partition
// already moved.
func (b *BatchSource) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	start := time.Now()
	_, gen := cl.GroupMetadata()
	var stopped []*batchPart
	b.mu.Lock()
	for topic, ids := range revoked {
		for _, id := range ids {
			tp := topicPartition{topic, id}
			if p := b.parts[tp]; p != nil {
				p.cancel()
				stopped = append(stopped, p)
				delete(b.parts, tp)
			}
		}
	}
	b.mu.Unlock()
	for _, p := range stopped {
		<-p.feed.Stopped()
	}
	if len(stopped) == 0 {
		return
	}
	took := time.Since(start)
	b.src.cfg.Logger.Info("franzsource: partitions revoked (batch mode)", "group", b.src.groupID, "generation", gen, "partitions", revoked, "drain", took)
	for _, h := range b.src.hooks.Rebalance {
		h.OnKafkaRebalance(ctx, kafkagroup.RebalanceEvent{Generation: gen, Revoked: true, Partitions: revoked, Drain: took})
	}
}

// commitGroup commits next as the group's offset of the partition.
func (b *BatchSource) commitGroup(ctx context.Context, topic string, id int32, next int64) error {
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	var err error
	offsets := map[string]map[int32]kgo.EpochOffset{topic: {id: {Epoch: -1, Offset: next}}}
	b.src.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, cerr error) {
		if cerr != nil {
			err = cerr
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
					err = errors.Join(err, fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, perr))
				}
			}
		}
	})
	return err
}
