package franzsource

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/sources/franzsource/internal/brokerwatch"
	"github.com/onceq/onceq/sources/internal/kafkacore"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// maxPoll bounds the records one poll takes; what is left stays buffered
// in the client for the next.
const maxPoll = 10000

// poll moves fetched records into their partitions' queues until Close,
// polling while the partitions have room (waitRoom).
// Under BlockRebalanceOnPoll no rebalance callback runs between a poll and
// AllowRebalance, so every record polled belongs to a partition this
// member owns, and the queues never hold a record of a revoked partition.
func (s *Source) poll() {
	defer close(s.pollDone)
	failures := 0
	for s.waitRoom() {
		fs := brokerwatch.Poll(s.ctx, &s.d.Status, s.seeds, failures > 0, func(ctx context.Context) kgo.Fetches {
			return s.cl.PollRecords(ctx, maxPoll)
		})
		if s.ctx.Err() != nil || fs.IsClientClosed() {
			s.cl.AllowRebalance()
			return
		}
		errs := brokerwatch.Fetches(&s.d.Status, s.seeds, fs, func(topic string, partition int32, err error) {
			s.cfg.Logger.Warn("franzsource: fetch failed", "topic", topic, "partition", partition, "error", err.Error())
		})
		s.enqueue(fs)
		s.cl.AllowRebalance()
		if errs == 0 || fs.NumRecords() > 0 {
			failures = 0
			continue
		}
		failures++
		select {
		case <-s.ctx.Done():
		case <-time.After(min(100*time.Millisecond<<min(failures, 6), 5*time.Second)):
		}
	}
}

// waitRoom holds the next poll while a partition holds
// MaxInFlightPerPartition unfinished records, until the settles free room.
// The client keeps what it fetched meanwhile, so the partition goes on
// with no refetch: pausing it would drop the client's buffer, and the
// refetch on resume can wait a whole FetchMaxWait behind a fetch of idle
// partitions. A partition still full after FetchMaxWait is paused instead,
// so that it holds back the others no longer. It returns false on Close.
func (s *Source) waitRoom() bool {
	deadline := time.NewTimer(s.cfg.FetchMaxWait)
	defer deadline.Stop()
	for {
		var full []*partition
		for _, p := range s.d.Partitions() {
			p.Lock()
			if p.State == kafkacore.Active && !p.X.paused.Load() && p.Tr.Unfinished() >= s.cfg.MaxInFlight {
				full = append(full, p)
			}
			p.Unlock()
		}
		if len(full) == 0 {
			return true
		}
		select {
		case <-s.room:
		case <-deadline.C:
			s.pause(full, false)
			return true
		case <-s.ctx.Done():
			return false
		}
	}
}

// enqueue queues polled records; once the records held reach
// MaxInFlightBytes it pauses every partition, until settles free half.
func (s *Source) enqueue(fs kgo.Fetches) {
	at := time.Now()
	fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
		s.mu.Lock()
		p := s.parts[topicPartition{ftp.Topic, ftp.Partition}]
		s.mu.Unlock()
		if p == nil {
			return
		}
		p.Lock()
		defer p.Unlock()
		if p.State == kafkacore.Active {
			p.HWM = max(p.HWM, ftp.HighWatermark)
		}
		for _, r := range ftp.Records {
			size := len(r.Key) + len(r.Value)
			for _, h := range r.Headers {
				size += len(h.Key) + len(h.Value)
			}
			s.d.EnqueueLocked(p, r.Offset, r, size, at)
		}
	})
	if s.d.Bytes() >= s.cfg.MaxInFlightBytes {
		s.pause(s.d.Partitions(), true)
	}
}

// pause pauses fetching ps, full (or all of them, for bytes). The client
// drops what it buffered for a paused partition and fetches it again on
// resume, so nothing is skipped; settles resume them (resumeLocked).
func (s *Source) pause(ps []*partition, forBytes bool) {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	if forBytes {
		s.bytesPaused.Store(true)
	}
	pause := map[string][]int32{}
	for _, p := range ps {
		// Under pauseMu and p's lock, which a settle counts under: a
		// settle that follows sees the pause, and one that preceded it is
		// counted here.
		p.Lock()
		if p.State == kafkacore.Active && !p.X.paused.Load() && (forBytes || p.Tr.Unfinished() >= s.cfg.MaxInFlight) {
			p.X.paused.Store(true)
			pause[p.Topic] = append(pause[p.Topic], p.ID)
		}
		p.Unlock()
	}
	if len(pause) > 0 {
		s.cl.PauseFetchPartitions(pause)
	}
	if forBytes {
		// The settles that freed room before bytesPaused was set did not
		// resume anything.
		s.resumeLocked()
	}
}

// tick commits on the interval until Close.
func (s *Source) tick() {
	defer close(s.tickDone)
	t := time.NewTicker(s.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.commitMu.Lock()
			// Close cuts it short: a commit waiting out a rebalance would
			// hold up the stop, and the final commit sends the same offsets.
			_ = s.commit(s.ctx, commitTimeout, s.owned())
			s.commitMu.Unlock()
		}
	}
}

func (s *Source) owned() []*partition {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		out = append(out, p)
	}
	return out
}

func (s *Source) onAssigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	_, gen := cl.GroupMetadata()
	s.mu.Lock()
	var ps []*partition
	for t, ids := range assigned {
		for _, id := range ids {
			tp := topicPartition{t, id}
			if p := s.parts[tp]; p != nil && slices.Contains(s.d.Partitions(), p) {
				continue // still active
			}
			p := kafkacore.NewPartition[*kgo.Record, partExt](t, id, gen, -1, s.tel)
			s.parts[tp] = p
			ps = append(ps, p)
		}
	}
	s.d.Add(ps...)
	s.mu.Unlock()
	s.cfg.Logger.Info("franzsource: partitions assigned", "group", s.groupID, "generation", gen, "partitions", assigned)
	for _, h := range s.hooks.Rebalance {
		h.OnKafkaRebalance(context.Background(), kafkagroup.RebalanceEvent{Generation: gen, Partitions: assigned})
	}
}

func (s *Source) onRevoked(_ context.Context, cl *kgo.Client, revoked map[string][]int32) {
	s.revoke(cl, revoked, false)
}

func (s *Source) onLost(_ context.Context, cl *kgo.Client, lost map[string][]int32) {
	s.revoke(cl, lost, true)
}

// revoke runs in the client's rebalance, which waits for it: the revoked
// partitions stop dispatching, their in-flight messages get up to
// RevokeTimeout to be settled (not when lost, nor when closing), what is
// complete is committed (not when lost: the commit would be refused), and
// they are released. The partitions this member keeps go on being served
// from their queues meanwhile.
func (s *Source) revoke(cl *kgo.Client, tps map[string][]int32, lost bool) {
	start := time.Now()
	_, gen := cl.GroupMetadata()
	closing := s.d.Closed()
	var ps []*partition
	s.mu.Lock()
	for t, ids := range tps {
		for _, id := range ids {
			if p := s.parts[topicPartition{t, id}]; p != nil {
				ps = append(ps, p) // active or draining: released ones left parts
			}
		}
	}
	s.mu.Unlock()
	if len(ps) == 0 {
		return
	}
	s.d.Stop(ps)
	s.pauseMu.Lock()
	resume := map[string][]int32{}
	for _, p := range ps {
		if p.X.paused.Swap(false) {
			// Paused is the client's state, kept across assignments.
			resume[p.Topic] = append(resume[p.Topic], p.ID)
		}
	}
	if len(resume) > 0 {
		cl.ResumeFetchPartitions(resume)
	}
	s.resumeLocked() // the bytes the revoked held are free
	s.pauseMu.Unlock()
	s.roomFreed() // the revoked no longer hold a poll back
	if !lost && !closing {
		s.d.Drain(ps, s.cfg.RevokeTimeout, s.ctx.Done())
	}
	s.commitMu.Lock()
	if !lost {
		_ = s.commit(context.Background(), commitTimeout, ps)
	}
	s.mu.Lock()
	abandoned := s.d.Release(ps)
	for _, p := range ps {
		if tp := (topicPartition{p.Topic, p.ID}); s.parts[tp] == p {
			delete(s.parts, tp)
		}
	}
	s.mu.Unlock()
	s.commitMu.Unlock()
	took := time.Since(start)
	what := "revoked"
	if lost {
		what = "lost"
	}
	s.cfg.Logger.Info("franzsource: partitions "+what, "group", s.groupID, "generation", gen,
		"partitions", tps, "drain", took, "abandoned", abandoned)
	for _, h := range s.hooks.Rebalance {
		h.OnKafkaRebalance(context.Background(), kafkagroup.RebalanceEvent{Generation: gen, Revoked: true, Partitions: tps, Drain: took, Abandoned: abandoned})
	}
}

// commitTimeout bounds one commit; a commit that times out is tried again.
const commitTimeout = 10 * time.Second

// commit commits every partition of ps whose offset moved forward, within
// timeout of parent. The caller holds commitMu, so commits never race each
// other or a release.
func (s *Source) commit(parent context.Context, timeout time.Duration, ps []*partition) error {
	offsets := kafkacore.Offsets(ps, func(id int32) int32 { return id },
		func(off int64) kgo.EpochOffset { return kgo.EpochOffset{Epoch: -1, Offset: off} })
	if len(offsets) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	var err error
	ok := map[topicPartition]int64{}
	s.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, cerr error) {
		if cerr != nil {
			err = cerr
			if req.Group == "" && ctx.Err() != nil {
				// franz-go answers with an empty request a commit that
				// gave up waiting for the member's join and sync.
				err = fmt.Errorf("%w (%v)", errRejoining, cerr)
			}
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
					err = errors.Join(err, fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, perr))
					continue
				}
				if off, found := offsets[t.Topic][p.Partition]; found {
					ok[topicPartition{t.Topic, p.Partition}] = off.Offset
				}
			}
		}
	})
	s.tel.Committed(context.Background(), err)
	for _, p := range ps {
		if off, found := ok[topicPartition{p.Topic, p.ID}]; found {
			p.Lock()
			p.Tr.CommittedAt(off)
			p.Unlock()
		}
	}
	for _, h := range s.hooks.Commit {
		for tp, off := range ok {
			h.OnKafkaCommit(context.Background(), tp.topic, tp.id, off)
		}
	}
	if err != nil && parent.Err() == nil { // not one Close cut short: the final commit follows
		_, gen := s.cl.GroupMetadata()
		err = fmt.Errorf("%w: %w", kafkagroup.ErrCommitFailed, err)
		s.cfg.Logger.Warn("franzsource: commit failed", "group", s.groupID, "error", err.Error())
		for _, h := range s.hooks.CommitError {
			h.OnKafkaCommitError(context.Background(), gen, err)
		}
	}
	return err
}

// tlsDial wraps a dialer in a TLS client handshake.
func tlsDial(dial func(ctx context.Context, network, host string) (net.Conn, error), cfg *tls.Config) func(ctx context.Context, network, host string) (net.Conn, error) {
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		conn, err := dial(ctx, network, host)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			if h, _, err := net.SplitHostPort(host); err == nil {
				c.ServerName = h
			}
		}
		tc := tls.Client(conn, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return tc, nil
	}
}
