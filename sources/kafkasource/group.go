package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/sources/internal/kafkacore"
	"github.com/onceq/onceq/sources/kafkagroup"
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
			s.cfg.Logger.Warn("kafkasource: joining the group failed", "group", s.groupID, "error", err.Error())
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
	s.stop.Final(nil) // made, or none to make: no generation held
	_ = s.group.Close()
}

func (s *Source) newGeneration(kgen *kgo.Generation) *generation {
	g := &generation{src: s, kgen: kgen, id: kgen.ID}
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
			p := kafkacore.NewPartition[kgo.Message, partExt](t, int32(a.ID), g.id, committed, s.tel)
			p.X = partExt{gen: g, start: a.Offset, space: make(chan struct{}, 1)}
			g.parts = append(g.parts, p)
		}
	}
	return g
}

func (g *generation) partitionMap() map[string][]int32 {
	m := map[string][]int32{}
	for _, p := range g.parts {
		m[p.Topic] = append(m[p.Topic], p.ID)
	}
	return m
}

// manage runs one generation: it starts a fetch loop per partition,
// commits on the interval, and on the generation's end drains and commits.
// On Close it commits, reports it on committed, and keeps the partitions
// until the group closes the generation.
func (s *Source) manage(ctx context.Context, g *generation, committed chan<- struct{}) {
	s.d.Add(g.parts...)
	s.cfg.Logger.Info("kafkasource: partitions assigned", "group", s.groupID, "generation", g.id,
		"member", g.kgen.MemberID, "partitions", g.partitionMap())
	for _, h := range s.hooks.Rebalance {
		h.OnKafkaRebalance(ctx, kafkagroup.RebalanceEvent{Generation: g.id, Partitions: g.partitionMap()})
	}
	for _, p := range g.parts {
		g.kgen.Start(func(ctx context.Context) { s.fetch(ctx, p) })
	}
	tick := time.NewTicker(s.cfg.CommitInterval)
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
			if err != nil && groupMovedOn(err) {
				// Not a failed stop: the group dropped this member (its
				// session ended, or a rebalance ended its generation) and
				// the partitions' next owner redoes what was not
				// committed, answered by dedup.
				s.cfg.Logger.Warn("kafkasource: the group moved on before the final commit; the partitions' next owner reads the uncommitted messages again",
					"group", s.groupID, "generation", g.id, "error", err.Error())
				err = nil
			}
			s.stop.Final(err)
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
		s.d.Drain(g.parts, s.cfg.RevokeTimeout, s.ctx.Done())
		_ = s.commit(g)
	}
	abandoned := s.release(g)
	took := time.Since(start)
	s.cfg.Logger.Info("kafkasource: partitions revoked", "group", s.groupID, "generation", g.id,
		"partitions", g.partitionMap(), "drain", took, "abandoned", abandoned)
	for _, h := range s.hooks.Rebalance {
		h.OnKafkaRebalance(context.Background(), kafkagroup.RebalanceEvent{Generation: g.id, Revoked: true, Partitions: g.partitionMap(), Drain: took, Abandoned: abandoned})
	}
}

// stopDispatch takes g's partitions out of Receive's reach.
func (s *Source) stopDispatch(g *generation) {
	s.d.Stop(g.parts)
}

// release hands g's partitions back: settles from now on are late. It
// returns how many messages were still in flight.
func (s *Source) release(g *generation) int {
	return s.d.Release(g.parts)
}

// commit commits, through g, every partition's offset that moved forward.
// Only g's manager calls it, so commits of one generation never race.
func (s *Source) commit(g *generation) error {
	offsets := kafkacore.Offsets(g.parts, func(id int32) int { return int(id) }, func(off int64) int64 { return off })
	if len(offsets) == 0 {
		return nil
	}
	err := g.kgen.CommitOffsets(offsets)
	s.tel.Committed(context.Background(), err)
	if err != nil {
		err = fmt.Errorf("%w: generation %d: %w", kafkagroup.ErrCommitFailed, g.id, err)
		s.cfg.Logger.Warn("kafkasource: commit failed", "group", s.groupID, "generation", g.id, "error", err.Error())
		for _, h := range s.hooks.CommitError {
			h.OnKafkaCommitError(context.Background(), g.id, err)
		}
		return err
	}
	for _, p := range g.parts {
		if off, ok := offsets[p.Topic][int(p.ID)]; ok {
			p.Lock()
			p.Tr.CommittedAt(off)
			p.Unlock()
		}
	}
	for _, h := range s.hooks.Commit {
		for t, ps := range offsets {
			for id, off := range ps {
				h.OnKafkaCommit(context.Background(), t, int32(id), off)
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
	r := s.newReader(p.Topic, int(p.ID))
	defer r.Close()
	if err := r.SetOffset(p.X.start); err != nil {
		s.cfg.Logger.Error("kafkasource: setting the start offset", "topic", p.Topic, "partition", p.ID, "error", err.Error())
		<-ctx.Done()
		return
	}
	failures := 0
	// Each partition's fetch errors are a failure of their own, so that
	// another partition's fetches do not end it; one that the generation
	// ends is no longer this member's to wait for.
	waiting := fmt.Sprintf("%s (%s partition %d)", kafkacore.WaitFetch, p.Topic, p.ID)
	defer func() {
		if failures > 0 {
			s.d.Status.Report(broker.Status{Broker: strings.Join(s.brokers, ","), Waiting: waiting})
		}
	}()
	space := false // told by the last enqueue: then no wait, no second lock
	for {
		if !space && !s.waitSpace(ctx, p) {
			return
		}
		space = false
		fctx, cancel := ctx, context.CancelFunc(func() {})
		if failures > 0 {
			// kafka-go retries a failed fetch itself: a fetch left without
			// an error for fetchQuiet is answered, records or none.
			fctx, cancel = context.WithTimeout(ctx, fetchQuiet)
		}
		m, err := r.FetchMessage(fctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if failures > 0 && errors.Is(err, context.DeadlineExceeded) && errors.Is(fctx.Err(), context.DeadlineExceeded) {
				s.d.Status.Report(broker.Status{Broker: strings.Join(s.brokers, ","), Waiting: waiting})
				failures = 0
				continue
			}
			failures++
			s.d.Status.Report(broker.Status{Broker: strings.Join(s.brokers, ","), Waiting: waiting,
				Err: fmt.Errorf("fetching %s partition %d: %w", p.Topic, p.ID, err)})
			s.fetchFailed(ctx, p.Topic, p.ID, err, failures)
			continue
		}
		if failures > 0 {
			s.d.Status.Report(broker.Status{Broker: strings.Join(s.brokers, ","), Waiting: waiting})
		}
		failures = 0
		space = s.enqueue(p, m)
	}
}

// fetchQuiet is how long after a failed fetch the next must go without
// an error for the partition's fetches to count as answered again: longer
// than kafka-go's and fetchFailed's waits between retries.
const fetchQuiet = 10 * time.Second

// fetchFailed logs a failed fetch and waits before the next, backing off.
// An error the broker answered with is not waited on: kafka-go retries
// such a fetch itself, backing off, and queues each error it gets ahead
// of the records that follow; a wait per error here would leave records
// behind a queue of stale errors long after the broker recovered. Those
// are logged at the 1st, 2nd, 4th, 8th… failure in a row.
func (s *Source) fetchFailed(ctx context.Context, topic string, id int32, err error, failures int) {
	var answered kgo.Error
	if errors.As(err, &answered) {
		if failures&(failures-1) == 0 {
			s.cfg.Logger.Warn("kafkasource: fetch failed; the reader retries it", "topic", topic, "partition", id,
				"error", err.Error(), "failures", failures)
		}
		return
	}
	delay := min(100*time.Millisecond<<min(failures, 6), 5*time.Second)
	s.cfg.Logger.Warn("kafkasource: fetch failed", "topic", topic, "partition", id, "error", err.Error(), "retry_in", delay)
	select {
	case <-ctx.Done():
	case <-time.After(delay):
	}
}

// newReader is a reader of one partition, with no group.
func (s *Source) newReader(topic string, id int) *kgo.Reader {
	return kgo.NewReader(kgo.ReaderConfig{
		Brokers: s.brokers, Topic: topic, Partition: id, Dialer: s.dialer,
		MinBytes: 1, MaxBytes: s.cfg.FetchMaxBytes, MaxWait: s.cfg.FetchMaxWait,
		// The reader's own queue holds records past our bounds: sized so
		// that even records of a whole fetch each fill a sixteenth of the
		// byte bound at most (one at 16 MiB or less, 16 at the default).
		QueueCapacity:   min(s.cfg.MaxInFlight, 100, max(1, int(s.cfg.MaxInFlightBytes/int64(s.cfg.FetchMaxBytes)/16))),
		ReadLagInterval: -1,
		Logger:          s.kLog, ErrorLogger: s.kErrLog,
	})
}

// waitSpace waits until p may hold one more message. It returns false once
// the generation ended.
func (s *Source) waitSpace(ctx context.Context, p *partition) bool {
	for {
		p.Lock()
		ok := s.hasSpaceLocked(p)
		p.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-p.X.space:
		}
	}
}

// hasSpaceLocked reports whether p may hold one more message; the caller
// holds p's lock. A partition with nothing unfinished may always take one,
// so a record larger than the byte bound still gets through.
func (s *Source) hasSpaceLocked(p *partition) bool {
	return p.State == kafkacore.Active && p.Tr.Unfinished() < s.cfg.MaxInFlight &&
		(s.d.Bytes() < s.cfg.MaxInFlightBytes || p.Tr.Unfinished() == 0)
}

// enqueue queues m and reports, under the same lock, whether p has space
// for another, which spares the fetch loop a second lock per record.
func (s *Source) enqueue(p *partition, m kgo.Message) (space bool) {
	p.Lock()
	defer p.Unlock()
	size := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		size += len(h.Key) + len(h.Value)
	}
	if s.d.EnqueueLocked(p, m.Offset, m, size, time.Now()) {
		p.HWM = max(p.HWM, m.HighWaterMark)
	}
	return s.hasSpaceLocked(p)
}
