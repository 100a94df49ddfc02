package kafkasource

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	kgo "github.com/segmentio/kafka-go"

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
	src     *Source
	core    kafkacore.Batching[kgo.Message]
	started atomic.Bool
}

// NewBatch makes a member of group reading topics from brokers in batch
// mode, its batches run by r. It checks what New checks. Run joins the
// group.
func NewBatch(ctx context.Context, brokers []string, group string, topics []string, r *batch.Runner, opts ...Option) (*BatchSource, error) {
	if r == nil {
		return nil, invalidOption("NewBatch: no batch.Runner")
	}
	src, err := New(ctx, brokers, group, topics, opts...)
	if err != nil {
		return nil, err
	}
	return &BatchSource{src: src, core: kafkacore.Batching[kgo.Message]{Runner: r, Group: group,
		ToMessage: setMessage, Produce: src.d.Produce, DeadLetterTopic: src.cfg.DeadLetterTopic,
		Queue: src.cfg.MaxInFlight, Hooks: src.hooks, Tel: src.tel, Logger: src.cfg.Logger}}, nil
}

// Check is [Source.Check].
func (b *BatchSource) Check(ctx context.Context) error { return b.src.Check(ctx) }

// Run joins the group and serves the partitions assigned to this member
// until ctx ends; then it stops each partition's Runner (a batch whose
// handler finished still commits), leaves the group and releases what
// the source holds. It returns nil on a stop by ctx. A BatchSource runs
// once.
func (b *BatchSource) Run(ctx context.Context) error {
	if !b.started.CompareAndSwap(false, true) {
		return errors.New("kafkasource: BatchSource.Run called twice")
	}
	s := b.src
	group, err := kgo.NewConsumerGroup(s.groupCfg)
	if err != nil {
		// New validated the same configuration.
		_ = s.Close(context.WithoutCancel(ctx))
		return invalidOption("consumer group: %v", err)
	}
	for {
		gen, err := group.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kgo.ErrGroupClosed) {
				break
			}
			s.cfg.Logger.Warn("kafkasource: joining the group failed", "group", s.groupID, "error", err.Error())
			continue
		}
		b.serve(ctx, gen)
	}
	// Closing the group ends the generation, waits for its goroutines
	// (the partitions' Runners, which ctx stopped) and leaves.
	_ = group.Close()
	return s.Close(context.WithoutCancel(ctx))
}

// serve starts a Runner for each partition of gen, under gen: kafka-go
// waits for them before it rejoins or leaves.
func (b *BatchSource) serve(ctx context.Context, gen *kgo.Generation) {
	s := b.src
	assigned := map[string][]int32{}
	for topic, as := range gen.Assignments {
		for _, a := range as {
			assigned[topic] = append(assigned[topic], int32(a.ID))
			gen.Start(func(gctx context.Context) { b.servePartition(ctx, gctx, gen, topic, a) })
		}
	}
	s.cfg.Logger.Info("kafkasource: partitions assigned (batch mode)", "group", s.groupID, "generation", gen.ID,
		"member", gen.MemberID, "partitions", assigned)
	for _, h := range s.hooks.Rebalance {
		h.OnKafkaRebalance(ctx, kafkagroup.RebalanceEvent{Generation: gen.ID, Partitions: assigned})
	}
	gen.Start(func(gctx context.Context) {
		<-gctx.Done()
		for _, h := range s.hooks.Rebalance {
			h.OnKafkaRebalance(context.Background(), kafkagroup.RebalanceEvent{Generation: gen.ID, Revoked: true, Partitions: assigned})
		}
	})
}

// servePartition takes the partition's offset row, reads it from the
// stored next offset and runs its Runner, until the generation or Run
// ends. A Runner stopped because the partition moved leaves the
// generation alone: returning early would end it for every partition.
func (b *BatchSource) servePartition(ctx, gctx context.Context, gen *kgo.Generation, topic string, a kgo.PartitionAssignment) {
	rctx, cancel := context.WithCancel(gctx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	lease, err := b.core.Acquire(rctx, topic, int32(a.ID), gen.MemberID)
	if err != nil {
		<-rctx.Done()
		return
	}
	start := lease.Next
	if start < 0 {
		start = a.Offset // the group's commit, or the reset policy's end
	}
	feed := b.core.Feed(lease, func(_ context.Context, next int64) error {
		return gen.CommitOffsets(map[string]map[int]int64{topic: {a.ID: next}})
	})
	var wg sync.WaitGroup
	wg.Go(func() { b.fetch(rctx, topic, a.ID, start, feed) })
	b.core.Run(rctx, feed)
	<-rctx.Done()
	wg.Wait()
}

// fetch reads one partition from start into feed until ctx ends or its
// Runner stopped.
func (b *BatchSource) fetch(ctx context.Context, topic string, id int, start int64, feed *kafkacore.BatchFeed[kgo.Message]) {
	s := b.src
	r := s.newReader(topic, id)
	defer r.Close()
	if err := r.SetOffset(start); err != nil {
		s.cfg.Logger.Error("kafkasource: setting the start offset", "topic", topic, "partition", id, "error", err.Error())
		return
	}
	failures := 0
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			s.fetchFailed(ctx, topic, int32(id), err, failures)
			continue
		}
		failures = 0
		if !feed.Push(ctx, m, time.Now()) {
			return
		}
	}
}
