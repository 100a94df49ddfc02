package franzsource

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/internal/logref"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/kafkacore"
)

const instrumentationName = "github.com/onceq/onceq/sources/franzsource"

// Source is a broker.Source reading topics as a member of a consumer
// group. It is safe for concurrent use.
type Source struct {
	cfg     config
	logs    *logref.Ref
	groupID string
	topics  []string
	cl      *kgo.Client // the group member
	prod    *kgo.Client // checks and dead letters; never joins the group
	// dlqMax is the dead-letter topic's max.message.bytes, learned by New.
	dlqMax int

	ctx      context.Context // ended by Close
	cancel   context.CancelFunc
	pollDone chan struct{} // the poll loop ended
	tickDone chan struct{} // the commit ticker ended
	done     chan struct{} // shutdown finished
	// final is closed once the final commit's outcome (closeErr) is known:
	// what Close is still waiting for then is the leave, which a rebalance
	// under way can hold up.
	final     chan struct{}
	closeOnce sync.Once
	// joinOnce joins the group at the first Receive, or, run by Close
	// first, marks the source as never joined.
	joinOnce sync.Once

	// commitMu orders commits with revokes: a revoked partition is
	// released only under it, so no commit of it can follow its hand-over.
	commitMu sync.Mutex

	// d queues, delivers and settles.
	d        kafkacore.Dispatcher[*kgo.Record, partExt]
	mu       sync.Mutex                    // guards parts and closeErr
	parts    map[topicPartition]*partition // owned now (active or draining)
	closeErr error

	// pauseMu orders the pauses and resumes of fetching, each decided
	// under it, so that the client is told them in the order decided.
	pauseMu sync.Mutex
	// bytesPaused: every partition was paused because the records held
	// reached MaxInFlightBytes.
	bytesPaused atomic.Bool
	// room receives when a partition's settles took it below
	// MaxInFlightPerPartition: wakes a poll held by waitRoom.
	room chan struct{}

	tel   *kafkacore.Telemetry
	hooks kafkacore.Hooks
}

type topicPartition struct {
	topic string
	id    int32
}

// partition is one assigned partition for one assignment: assigned again
// later, it gets a new one.
type partition = kafkacore.Partition[*kgo.Record, partExt]

type partExt struct {
	// paused: fetching paused for lack of room. Changed under pauseMu and
	// the partition's lock, so that a settle that follows a pause sees it.
	paused atomic.Bool
}

// New makes a member of group reading topics from seeds, the bootstrap
// brokers, each host:port. It checks, within ctx (bounded by 30 s when ctx
// has no deadline), that the topics and the dead-letter topic exist. It
// joins the group at the first Receive, asynchronously: messages come once
// partitions are assigned. So a consumer that finds its store broken at
// start (Run checks it before the first Receive) never takes partitions
// from the group's healthy members.
func New(ctx context.Context, seeds []string, group string, topics []string, opts ...Option) (*Source, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	switch {
	case len(seeds) == 0:
		return nil, invalidOption("no brokers")
	case group == "":
		return nil, invalidOption("no group ID")
	case len(topics) == 0:
		return nil, invalidOption("no topics")
	}
	if err := kafkacore.CheckBrokers("franzsource", seeds); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logs := logref.New(cfg.logger)
	cfg.logger = logs.Logger()
	hs, err := kafkacore.CollectHooks("franz", ErrInvalidConfig, cfg.hooks)
	if err != nil {
		return nil, err
	}
	if cfg.meter == nil {
		cfg.meter = otel.GetMeterProvider()
	}
	s := &Source{
		logs: logs, cfg: cfg, hooks: hs, groupID: group, topics: slices.Clone(topics),
		parts:    map[topicPartition]*partition{},
		pollDone: make(chan struct{}), tickDone: make(chan struct{}), done: make(chan struct{}), room: make(chan struct{}, 1),
		final: make(chan struct{}),
	}
	s.d.Init()
	s.d.ToMessage, s.d.OnDone, s.d.Errs = setMessage, s.settled, kafkacore.Errors{
		Foreign: ErrForeignMessage, NotInFlight: ErrNotInFlight, NoDeadLetterTopic: ErrNoDeadLetterTopic,
		DeadLetterFailed: ErrDeadLetterFailed}
	s.d.Hooks, s.d.Logger, s.d.DeadLetterTopic = hs, cfg.logger, cfg.dlqTopic
	if cfg.dlqTopic != "" {
		s.d.Produce = s.produceDeadLetter
	}
	common := s.clientOpts(seeds)
	prodOpts := append(common, kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), kgo.ProducerLinger(0))
	if s.prod, err = kgo.NewClient(prodOpts...); err != nil {
		return nil, invalidOption("client: %v", err)
	}
	if err := s.Check(ctx); err != nil {
		s.prod.Close()
		return nil, err
	}
	if cfg.dlqTopic != "" {
		// The client's own batch limit (1,000,012 bytes by default) made
		// as large as the dead-letter topic takes, learned by Check: a
		// copy the broker would accept is never refused in the client.
		s.prod.Close()
		if s.prod, err = kgo.NewClient(append(prodOpts, kgo.ProducerBatchMaxBytes(int32(s.dlqMax)))...); err != nil {
			return nil, invalidOption("client: %v", err)
		}
	}
	if s.tel, err = kafkacore.NewTelemetry(cfg.meter, instrumentationName, group, topics, cfg.dlqTopic, &s.d); err != nil {
		s.prod.Close()
		return nil, fmt.Errorf("franzsource: metrics: %w", err)
	}
	s.d.Tel = s.tel
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.cl, err = kgo.NewClient(append(common, s.groupOpts()...)...); err != nil {
		s.cancel()
		_ = s.tel.Unregister()
		s.prod.Close()
		return nil, invalidOption("group client: %v", err)
	}
	return s, nil
}

// join subscribes the group client to the topics, which makes it join the
// group, and starts the poll loop and the commit ticker; once, at the
// first Receive. After Close it does nothing.
func (s *Source) join() {
	s.joinOnce.Do(func() {
		s.cl.AddConsumeTopics(s.topics...)
		go s.poll()
		go s.tick()
	})
}

func (s *Source) clientOpts(seeds []string) []kgo.Opt {
	c := s.cfg
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID(c.clientID), kgo.WithLogger(kgoLogger{c.logger})}
	if c.dial != nil {
		opts = append(opts, kgo.Dialer(c.dial))
	}
	if c.tls != nil {
		if c.dial != nil {
			dial := c.dial
			opts = append(opts[:len(opts)-1], kgo.Dialer(tlsDial(dial, c.tls)))
		} else {
			opts = append(opts, kgo.DialTLSConfig(c.tls))
		}
	}
	if len(c.sasl) > 0 {
		opts = append(opts, kgo.SASL(c.sasl...))
	}
	return opts
}

func (s *Source) groupOpts() []kgo.Opt {
	c := s.cfg
	opts := []kgo.Opt{
		// No topics yet: the client joins the group once join adds them.
		kgo.ConsumerGroup(s.groupID),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.onAssigned), kgo.OnPartitionsRevoked(s.onRevoked), kgo.OnPartitionsLost(s.onLost),
		kgo.ConsumeResetOffset(c.reset.offset()),
		kgo.FetchMaxWait(c.fetchMaxWait), kgo.FetchMaxBytes(c.fetchMaxBytes),
		kgo.HeartbeatInterval(c.heartbeat), kgo.SessionTimeout(c.session), kgo.RebalanceTimeout(c.rebalance),
	}
	switch c.protocol {
	case Cooperative:
		opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()))
	case ConsumerProtocol:
		opts = append(opts, kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer())
	case Eager:
		opts = append(opts, kgo.Balancers(kgo.StickyBalancer()))
	}
	if c.instanceID != "" {
		opts = append(opts, kgo.InstanceID(c.instanceID))
	}
	return opts
}

// Capabilities declares the configured ordering and Fingerprint as the
// default key, broker.KeyFromRecord (the consumer's WithKeyFunc still wins), the same as
// sources/kafkasource. Deliveries never time out: a record stays with this
// member until its partition is revoked.
func (s *Source) Capabilities() broker.Capabilities {
	return broker.Capabilities{Ordering: s.cfg.ordering, DefaultKey: broker.KeyFromRecord,
		DeadLetter: s.cfg.dlqTopic != "", Replayable: true}
}

// Attach implements broker.Source: the Source logs to rt.Logger unless
// WithLogger gave it one, and an unfinished record may hold back its
// partition's commits for rt.CommitHold at most (see CommitHeldError).
func (s *Source) Attach(rt broker.Runtime) {
	s.logs.Inherit(rt.Logger)
	s.d.LimitHold(rt.CommitHold)
}

// Check proves the brokers can be reached and the topics, and the
// dead-letter topic if one is set, exist. It honours ctx, and is bounded
// by 30 s when ctx has no deadline.
func (s *Source) Check(ctx context.Context) error {
	ctx, cancel := kafkacore.BoundCheck(ctx)
	defer cancel()
	topics := slices.Clone(s.topics)
	if s.cfg.dlqTopic != "" {
		topics = append(topics, s.cfg.dlqTopic)
	}
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, s.prod)
	if err != nil {
		return fmt.Errorf("franzsource: reading metadata of %v: %w", topics, err)
	}
	for _, t := range topics {
		i := slices.IndexFunc(resp.Topics, func(rt kmsg.MetadataResponseTopic) bool { return rt.Topic != nil && *rt.Topic == t })
		if i < 0 {
			return fmt.Errorf("%w: %q", ErrUnknownTopic, t)
		}
		if err := kerr.ErrorForCode(resp.Topics[i].ErrorCode); err != nil {
			if err == kerr.UnknownTopicOrPartition {
				return fmt.Errorf("%w: %q: %w", ErrUnknownTopic, t, err)
			}
			return fmt.Errorf("franzsource: metadata of %q: %w", t, err)
		}
	}
	if s.cfg.dlqTopic == "" {
		return nil
	}
	limits, err := s.maxMessageBytes(ctx, topics)
	if err != nil {
		return err
	}
	if s.dlqMax == 0 {
		s.dlqMax = limits[s.cfg.dlqTopic] // learned once, by New, before the producer exists
	}
	if err := kafkacore.CheckDeadLetterRoom(limits, s.topics, s.cfg.dlqTopic); err != nil {
		return fmt.Errorf("franzsource: %w", err)
	}
	return nil
}

// maxMessageBytes reads the topics' max.message.bytes from the brokers
// (DescribeConfigs).
func (s *Source) maxMessageBytes(ctx context.Context, topics []string) (map[string]int, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, t := range topics {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, t
		r.ConfigNames = []string{kafkacore.MaxMessageBytesConfig}
		req.Resources = append(req.Resources, r)
	}
	resp, err := req.RequestWith(ctx, s.prod)
	if err != nil {
		return nil, fmt.Errorf("franzsource: reading %s of %v: %w", kafkacore.MaxMessageBytesConfig, topics, err)
	}
	out := make(map[string]int, len(topics))
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return nil, fmt.Errorf("franzsource: reading %s of %q: %w", kafkacore.MaxMessageBytesConfig, r.ResourceName, err)
		}
		for _, c := range r.Configs {
			if n, err := strconv.Atoi(value(c.Value)); c.Name == kafkacore.MaxMessageBytesConfig && err == nil && n > 0 {
				out[r.ResourceName] = n
			}
		}
	}
	for _, t := range topics {
		if out[t] == 0 {
			out[t] = kafkacore.DefaultMaxMessageBytes // not told: the broker's default
		}
	}
	return out, nil
}

// Extend does nothing: Kafka deliveries do not time out (Capabilities
// declares none, so the consumer never calls it).
func (s *Source) Extend(context.Context, *broker.Message, time.Duration) error { return nil }

// Receive waits for a message and returns up to max, from the assigned
// partitions in turn, each partition's in offset order.
func (s *Source) Receive(ctx context.Context, max int) ([]*broker.Message, error) {
	s.join()
	return s.d.Receive(ctx, max)
}

// Ack settles m as done; its offset is committed once all below it are.
// After m's partition left this member the ack is dropped and counted
// (see [LateAckHook]), with a nil error: the new owner reads m again.
func (s *Source) Ack(ctx context.Context, m *broker.Message) error { return s.d.Ack(ctx, m) }

// Nack gives m back: it is delivered again after delay, Attempt+1, its
// offset held. A revoked partition's message is left to the next owner.
func (s *Source) Nack(ctx context.Context, m *broker.Message, delay time.Duration) error {
	return s.d.Nack(ctx, m, delay)
}

// DeadLetter writes m to the DeadLetterTopic (key, value, headers, plus
// the reason and origin headers) and then settles it. If there is no such
// topic or the write fails, m stays in flight and the error says so.
func (s *Source) DeadLetter(ctx context.Context, m *broker.Message, reason string) error {
	return s.d.DeadLetter(ctx, m, reason)
}

func (s *Source) produceDeadLetter(ctx context.Context, orig *kgo.Record, reason, topic string, partition int32, offset int64) error {
	in := make([]kafkacore.Header, len(orig.Headers))
	for i, h := range orig.Headers {
		in[i] = kafkacore.Header{Key: h.Key, Value: h.Value}
	}
	rec := &kgo.Record{Topic: s.cfg.dlqTopic, Key: orig.Key, Value: orig.Value, Timestamp: orig.Timestamp}
	for _, h := range kafkacore.DeadLetterHeaders(in, len(orig.Key)+len(orig.Value), reason, topic, partition, offset, s.dlqMax) {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return s.prod.ProduceSync(ctx, rec).FirstErr()
}

// settled runs after one of p's records is done, which left unfinished:
// it resumes fetching once a pause's room is half free (resuming at the
// first free slot would refetch a batch for every few records settled).
// Only then does it take pauseMu.
func (s *Source) settled(p *partition, unfinished int) {
	if unfinished == s.cfg.maxInFlight-1 {
		s.roomFreed()
	}
	if s.d.Bytes() > s.cfg.maxInFlightBytes/2 {
		return // bytes bound every partition: resume once half are free
	}
	if p.X.paused.Load() && unfinished <= s.cfg.maxInFlight/2 || s.bytesPaused.Load() {
		s.pauseMu.Lock()
		s.resumeLocked()
		s.pauseMu.Unlock()
	}
}

// roomFreed wakes a poll held by waitRoom.
func (s *Source) roomFreed() {
	select {
	case s.room <- struct{}{}:
	default:
	}
}

// resumeLocked resumes every paused active partition with half its room
// free, when half the byte bound is free; the caller holds pauseMu.
func (s *Source) resumeLocked() {
	if s.d.Bytes() > s.cfg.maxInFlightBytes/2 {
		return
	}
	s.bytesPaused.Store(false)
	resume := map[string][]int32{}
	for _, p := range s.d.Partitions() {
		p.Lock()
		if p.X.paused.Load() && p.State == kafkacore.Active && p.Tr.Unfinished() <= s.cfg.maxInFlight/2 {
			p.X.paused.Store(false)
			resume[p.Topic] = append(resume[p.Topic], p.ID)
		}
		p.Unlock()
	}
	if len(resume) > 0 {
		s.cl.ResumeFetchPartitions(resume)
	}
}

// Close stops dispatching, commits what is complete, leaves the group
// (unless InstanceID is set) and stops every goroutine of the source.
// Messages not settled stay with the group: their offsets were not
// committed. Close is idempotent. It returns the final commit's error
// (ErrCommitFailed) unless the group refused it because it had moved on
// (this member dropped, its generation or member epoch over, or a
// rebalance still under way when the rebalance timeout had passed): that
// is logged as a warning and Close returns nil, since the partitions' next
// owner reads the uncommitted messages again. If ctx ends first, the
// shutdown goes on in the background and Close returns ctx's error, unless
// only the leave was left: a rebalance under way holds a leave up until
// the group answers, and a stop whose commit is made is not failed by what
// the group does meanwhile.
func (s *Source) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.d.Close()
		s.cancel()
		s.joinOnce.Do(func() { // never joined: no loop to wait for
			close(s.pollDone)
			close(s.tickDone)
		})
		go s.shutdown()
	})
	select {
	case <-s.done:
	case <-ctx.Done():
		select {
		case <-s.final:
			s.cfg.logger.Warn("franzsource: leaving the group goes on after Close returned: the group is rebalancing",
				"group", s.groupID, "error", ctx.Err().Error())
		default:
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeErr
}

// shutdown runs once, owned by Close: after the poll loop and the ticker
// stop it commits, then closes the group client (leaving the group, which
// releases every partition through onRevoked) and the producer. It closes
// done last, which Close waits for.
func (s *Source) shutdown() {
	<-s.pollDone
	<-s.tickDone
	s.commitMu.Lock()
	// A member rejoining the group cannot commit until its join and sync
	// are done, which the broker ends within the rebalance timeout: a
	// commit still waiting then is one the group has moved past.
	err := s.commit(context.Background(), min(commitTimeout, s.cfg.rebalance), s.owned())
	s.commitMu.Unlock()
	if err != nil && groupMovedOn(err) {
		// Not a failed stop: the group dropped this member (its session
		// ended, or a rebalance ended its generation) and the partitions'
		// next owner redoes what was not committed, answered by dedup.
		s.cfg.logger.Warn("franzsource: the group moved on before the final commit; the partitions' next owner reads the uncommitted messages again",
			"group", s.groupID, "error", err.Error())
		err = nil
	}
	s.mu.Lock()
	s.closeErr = err
	s.mu.Unlock()
	close(s.final)
	s.cl.CloseAllowingRebalance()
	s.prod.Close()
	_ = s.tel.Unregister()
	close(s.done)
}

func value(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
