package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/internal/kafkacore"
)

// loop follows the group's generations until Close. It owns every
// goroutine of the source: the generation's manager and fetch loops run
// under the generation (gen.Start), which kafka-go waits for before it
// rejoins or leaves, so a revoked generation's drain and commit always
// finish while this member still belongs to it.
func (s *Source) loop() {
	defer close(s.loopDone)
	for {
		kgen, err := s.group.Next(s.ctx)
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, kgo.ErrGroupClosed) {
				break
			}
			// kafka-go backs off and rejoins by itself.
			s.cfg.logger.Warn("kafka: joining the group failed", "group", s.groupID, "error", err.Error())
			continue
		}
		g := s.newGeneration(kgen)
		ended := make(chan struct{})
		committed := make(chan struct{})
		kgen.Start(func(ctx context.Context) {
			defer close(ended)
			s.manage(ctx, g, committed)
		})
		select {
		case <-ended:
			continue
		case <-committed:
		}
		break
	}
	// Closing the group ends the generation (the manager then releases its
	// partitions), waits for its goroutines and leaves the group. Only
	// after the final commit: leaving first would invalidate it.
	_ = s.group.Close()
}

func (s *Source) newGeneration(kgen *kgo.Generation) *generation {
	g := &generation{src: s, kgen: kgen, id: kgen.ID, settled: make(chan struct{}, 1)}
	topics := make([]string, 0, len(kgen.Assignments))
	for t := range kgen.Assignments {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	for _, t := range topics {
		for _, a := range kgen.Assignments[t] {
			committed := int64(-1)
			if a.Offset >= 0 {
				committed = a.Offset
			}
			g.parts = append(g.parts, &partition{
				gen: g, topic: t, id: int32(a.ID), start: a.Offset,
				tr: kafkacore.NewTracker(committed), timers: map[*entry]*time.Timer{},
				space: make(chan struct{}, 1), lagSet: s.tel.PartitionSet(t, int32(a.ID)),
			})
		}
	}
	return g
}

func (g *generation) partitionMap() map[string][]int32 {
	m := map[string][]int32{}
	for _, p := range g.parts {
		m[p.topic] = append(m[p.topic], p.id)
	}
	return m
}

// manage runs one generation: it starts a fetch loop per partition,
// commits on the interval, and on the generation's end drains and commits.
// On Close it commits, reports it on committed, and keeps the partitions
// until the group closes the generation.
func (s *Source) manage(ctx context.Context, g *generation, committed chan<- struct{}) {
	s.mu.Lock()
	s.parts = slices.Clone(g.parts)
	s.rr = 0
	s.mu.Unlock()
	s.cfg.logger.Info("kafka: partitions assigned", "group", s.groupID, "generation", g.id,
		"member", g.kgen.MemberID, "partitions", g.partitionMap())
	for _, h := range s.hooks.Rebalance {
		h.OnRebalance(ctx, RebalanceEvent{Generation: g.id, Partitions: g.partitionMap()})
	}
	for _, p := range g.parts {
		g.kgen.Start(func(ctx context.Context) { s.fetch(ctx, p) })
	}
	tick := time.NewTicker(s.cfg.commitInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			_ = s.commit(g)
		case <-ctx.Done():
			s.revoke(g, false)
			return
		case <-s.ctx.Done():
			s.stopDispatch(g)
			err := s.commit(g)
			s.mu.Lock()
			s.closeErr = err
			s.mu.Unlock()
			close(committed)
			<-ctx.Done()
			s.revoke(g, true)
			return
		}
	}
}

// revoke stops dispatching g's partitions, waits up to RevokeTimeout for
// their in-flight messages (not when closing: Close does not wait for
// unsettled messages), commits what is complete and releases them.
func (s *Source) revoke(g *generation, closing bool) {
	start := time.Now()
	s.stopDispatch(g)
	if !closing {
		deadline := time.NewTimer(s.cfg.revokeTimeout)
	wait:
		for s.inFlight(g) > 0 {
			select {
			case <-g.settled:
			case <-deadline.C:
				break wait
			case <-s.ctx.Done():
				break wait
			}
		}
		deadline.Stop()
		_ = s.commit(g)
	}
	abandoned := s.release(g)
	took := time.Since(start)
	s.cfg.logger.Info("kafka: partitions revoked", "group", s.groupID, "generation", g.id,
		"partitions", g.partitionMap(), "drain", took, "abandoned", abandoned)
	for _, h := range s.hooks.Rebalance {
		h.OnRebalance(context.Background(), RebalanceEvent{Generation: g.id, Revoked: true, Partitions: g.partitionMap(), Drain: took, Abandoned: abandoned})
	}
}

func (s *Source) inFlight(g *generation) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range g.parts {
		n += p.inFlight
	}
	return n
}

// stopDispatch takes g's partitions out of Receive's reach. What is queued
// is dropped, still unfinished in the tracker, so the commit stays below
// it and the next owner reads it again.
func (s *Source) stopDispatch(g *generation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range g.parts {
		if p.state == active {
			p.state = draining
		}
		p.queue = nil
		for e, t := range p.timers {
			t.Stop()
			delete(p.timers, e)
		}
	}
	s.parts = slices.DeleteFunc(s.parts, func(p *partition) bool { return p.gen == g })
}

// release hands g's partitions back: settles from now on are late. It
// returns how many messages were still in flight.
func (s *Source) release(g *generation) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range g.parts {
		p.state = released
		n += p.inFlight
	}
	return n
}

// commit commits, through g, every partition's offset that moved forward.
// Only g's manager calls it, so commits of one generation never race.
func (s *Source) commit(g *generation) error {
	offsets := map[string]map[int]int64{}
	s.mu.Lock()
	for _, p := range g.parts {
		if p.state == released {
			continue
		}
		if off, ok := p.tr.ToCommit(); ok {
			if offsets[p.topic] == nil {
				offsets[p.topic] = map[int]int64{}
			}
			offsets[p.topic][int(p.id)] = off
		}
	}
	s.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	err := g.kgen.CommitOffsets(offsets)
	s.tel.Committed(context.Background(), err)
	if err != nil {
		err = fmt.Errorf("%w: generation %d: %w", ErrCommitFailed, g.id, err)
		s.cfg.logger.Warn("kafka: commit failed", "group", s.groupID, "generation", g.id, "error", err.Error())
		for _, h := range s.hooks.CommitError {
			h.OnCommitError(context.Background(), g.id, err)
		}
		return err
	}
	s.mu.Lock()
	for _, p := range g.parts {
		if off, ok := offsets[p.topic][int(p.id)]; ok {
			p.tr.CommittedAt(off)
		}
	}
	s.mu.Unlock()
	for _, h := range s.hooks.Commit {
		for t, ps := range offsets {
			for id, off := range ps {
				h.OnCommit(context.Background(), t, int32(id), off)
			}
		}
	}
	return nil
}

// fetch reads one partition from the generation's starting offset into
// its queue, holding at most MaxInFlightPerPartition unfinished messages.
// It returns only when the generation ends: a fetch loop returning early
// would end the generation (kafka-go's rule for gen.Start), so on Close it
// idles instead.
func (s *Source) fetch(ctx context.Context, p *partition) {
	r := kgo.NewReader(kgo.ReaderConfig{
		Brokers: s.brokers, Topic: p.topic, Partition: int(p.id), Dialer: s.dialer,
		MinBytes: 1, MaxBytes: s.cfg.fetchMaxBytes, MaxWait: s.cfg.fetchMaxWait,
		QueueCapacity:   min(s.cfg.maxInFlight, 100),
		ReadLagInterval: -1,
		Logger:          s.kLog, ErrorLogger: s.kErrLog,
	})
	defer r.Close()
	if err := r.SetOffset(p.start); err != nil {
		s.cfg.logger.Error("kafka: setting the start offset", "topic", p.topic, "partition", p.id, "error", err.Error())
		<-ctx.Done()
		return
	}
	failures := 0
	for s.waitSpace(ctx, p) {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			delay := min(100*time.Millisecond<<min(failures, 6), 5*time.Second)
			s.cfg.logger.Warn("kafka: fetch failed", "topic", p.topic, "partition", p.id, "error", err.Error(), "retry_in", delay)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			continue
		}
		failures = 0
		s.enqueue(p, m)
	}
}

// waitSpace waits until p may hold one more message. It returns false once
// the generation ended.
func (s *Source) waitSpace(ctx context.Context, p *partition) bool {
	for {
		s.mu.Lock()
		ok := p.state == active && p.tr.Unfinished() < s.cfg.maxInFlight
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-p.space:
		}
	}
}

func (s *Source) enqueue(p *partition, m kgo.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.state != active || !p.tr.Add(m.Offset) {
		return
	}
	p.hwm = max(p.hwm, m.HighWaterMark)
	p.queue = append(p.queue, &entry{p: p, msg: m, id: kafkacore.RecordID(p.topic, p.id, m.Offset)})
	s.signalLocked()
}
