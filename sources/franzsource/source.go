package franzsource

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/kgox"
	"github.com/onceq/onceq/sources/franzsource/internal/brokerwatch"
	"github.com/onceq/onceq/sources/internal/kafkacore"
	"github.com/onceq/onceq/sources/internal/kafkaopt"
	"github.com/onceq/onceq/sources/kafkagroup"
)

const instrumentationName = "github.com/onceq/onceq/sources/franzsource"

// Source is a broker.Source reading topics as a member of a consumer
// group. It is safe for concurrent use. Its Capabilities, Ack, Nack,
// DeadLetter and Extend are those of both Kafka sources: see package
// kafkagroup.
type Source struct {
	methods
	cfg      config
	groupID  string
	topics   []string
	seeds    string // the seed brokers, as the broker reports name them
	seedList []string
	cl       *kgo.Client // the group member
	prod     *kgo.Client // checks and dead letters; never joins the group
	// dlqMax is the dead-letter topic's max.message.bytes, learned by New.
	dlqMax int

	ctx      context.Context // ended by Close
	cancel   context.CancelFunc
	pollDone chan struct{} // the poll loop ended
	tickDone chan struct{} // the commit ticker ended
	// stop follows the shutdown: the final commit's outcome, then its end.
	stop      *kafkacore.Stopping
	closeOnce sync.Once
	// joinOnce joins the group at the first Receive, or, run by Close
	// first, marks the source as never joined.
	joinOnce sync.Once

	// commitMu orders commits with revokes: a revoked partition is
	// released only under it, so no commit of it can follow its hand-over.
	commitMu sync.Mutex

	// d queues, delivers and settles.
	d     kafkacore.Dispatcher[*kgo.Record, partExt]
	mu    sync.Mutex                    // guards parts
	parts map[topicPartition]*partition // owned now (active or draining)

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

// methods are the Source's Capabilities, Ack, Nack, DeadLetter and
// Extend.
type methods = kafkacore.Methods[*kgo.Record, partExt]

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
	return newSource(ctx, seeds, group, topics, opts, func(s *Source) []kgo.Opt {
		return append(s.groupOpts(),
			kgo.OnPartitionsAssigned(s.onAssigned), kgo.OnPartitionsRevoked(s.onRevoked), kgo.OnPartitionsLost(s.onLost))
	})
}

// newSource is New, with the group client made with the options
// groupOpts gives: those of the group and its rebalance callbacks.
func newSource(ctx context.Context, seeds []string, group string, topics []string, opts []Option, groupOpts func(*Source) []kgo.Opt) (*Source, error) {
	cfg := config{clientID: "onceq"}
	hs, logs, err := kafkacore.Setup("franzsource", seeds, group, topics, kafkaopt.ApplyFranz(opts, &cfg), &cfg)
	if err != nil {
		return nil, err
	}
	s := &Source{
		cfg: cfg, hooks: hs, groupID: group, topics: slices.Clone(topics), seeds: strings.Join(seeds, ","), seedList: slices.Clone(seeds),
		parts:    map[topicPartition]*partition{},
		pollDone: make(chan struct{}), tickDone: make(chan struct{}), room: make(chan struct{}, 1),
		stop: kafkacore.NewStopping(),
	}
	s.methods = s.d.Configure(setMessage, s.settled, hs, &s.cfg.Settings, logs)
	if cfg.DeadLetterTopic != "" {
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
	if cfg.DeadLetterTopic != "" {
		// The client's own batch limit (1,000,012 bytes by default) made
		// as large as the dead-letter topic takes, learned by Check: a
		// copy the broker would accept is never refused in the client.
		s.prod.Close()
		if s.prod, err = kgo.NewClient(append(prodOpts, kgo.ProducerBatchMaxBytes(int32(s.dlqMax)))...); err != nil {
			return nil, invalidOption("client: %v", err)
		}
	}
	if s.tel, err = kafkacore.NewTelemetry(cfg.Meter, instrumentationName, group, topics, cfg.DeadLetterTopic, &s.d); err != nil {
		s.prod.Close()
		return nil, fmt.Errorf("franzsource: metrics: %w", err)
	}
	s.d.Tel = s.tel
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.cl, err = kgo.NewClient(append(common, groupOpts(s)...)...); err != nil {
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

// String names the source in the consumer's log lines: its group, topics
// and brokers.
func (s *Source) String() string {
	return kafkacore.SourceName("franzsource", s.groupID, s.topics, s.seeds)
}

func (s *Source) clientOpts(seeds []string) []kgo.Opt {
	c := s.cfg
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID(c.clientID), kgo.WithLogger(kgox.Logger{L: c.Logger}),
		kgo.WithHooks(brokerwatch.Hooks{R: &s.d.Status})}
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

// groupOpts are the group client's options but its rebalance callbacks.
func (s *Source) groupOpts() []kgo.Opt {
	c := s.cfg
	opts := []kgo.Opt{
		// No topics yet: the client joins the group once join adds them.
		kgo.ConsumerGroup(s.groupID),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		// A partition error the client retries itself (a broker's failed
		// disk: KAFKA_STORAGE_ERROR, say) is returned too, so that poll
		// reports it: stripped, a broker answering every fetch with one
		// would leave the consumer ready and nothing logged.
		kgo.KeepRetryableFetchErrors(),
		kgo.ConsumeResetOffset(resetOffset(c.Reset)),
		kgo.FetchMaxWait(c.FetchMaxWait), kgo.FetchMaxBytes(int32(c.FetchMaxBytes)),
		kgo.HeartbeatInterval(c.Heartbeat), kgo.SessionTimeout(c.Session), kgo.RebalanceTimeout(c.Rebalance),
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

// Check proves the brokers can be reached and the topics, and the
// dead-letter topic if one is set, exist. It honours ctx, and is bounded
// by 30 s when ctx has no deadline.
func (s *Source) Check(ctx context.Context) error {
	return kafkacore.Check(ctx, "franzsource", s.seedList, s.cfg.Logger, s.topics, s.cfg.DeadLetterTopic, &s.dlqMax, s.checkTopics, s.maxMessageBytes)
}

// checkTopics proves, from the brokers' metadata, that topics exist.
func (s *Source) checkTopics(ctx context.Context, topics []string) error {
	return kgox.CheckTopics(ctx, s.prod, "franzsource", topics, kafkagroup.ErrUnknownTopic)
}

// maxMessageBytes reads the topics' max.message.bytes from the brokers
// (DescribeConfigs).
func (s *Source) maxMessageBytes(ctx context.Context, topics []string) (kafkacore.MessageLimits, error) {
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
	out := make(kafkacore.MessageLimits, len(topics))
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return nil, fmt.Errorf("franzsource: reading %s of %q: %w", kafkacore.MaxMessageBytesConfig, r.ResourceName, err)
		}
		for _, c := range r.Configs {
			out.Add(r.ResourceName, c.Name, value(c.Value))
		}
	}
	return out.Fill(topics), nil
}

// Receive waits for a message and returns up to max, from the assigned
// partitions in turn, each partition's in offset order.
func (s *Source) Receive(ctx context.Context, max int) ([]*broker.Message, error) {
	s.join()
	return s.d.Receive(ctx, max)
}

func (s *Source) produceDeadLetter(ctx context.Context, orig *kgo.Record, reason, topic string, partition int32, offset int64) error {
	rec := &kgo.Record{Topic: s.cfg.DeadLetterTopic, Key: orig.Key, Value: orig.Value, Timestamp: orig.Timestamp,
		Headers: kafkacore.DeadLetterHeaders(orig.Headers, len(orig.Key)+len(orig.Value), reason, topic, partition, offset, s.dlqMax)}
	return s.prod.ProduceSync(ctx, rec).FirstErr()
}

// settled runs after one of p's records is done, which left unfinished:
// it resumes fetching once a pause's room is half free (resuming at the
// first free slot would refetch a batch for every few records settled).
// Only then does it take pauseMu.
func (s *Source) settled(p *partition, unfinished int) {
	if unfinished == s.cfg.MaxInFlight-1 {
		s.roomFreed()
	}
	if s.d.Bytes() > s.cfg.MaxInFlightBytes/2 {
		return // bytes bound every partition: resume once half are free
	}
	if p.X.paused.Load() && unfinished <= s.cfg.MaxInFlight/2 || s.bytesPaused.Load() {
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
	if s.d.Bytes() > s.cfg.MaxInFlightBytes/2 {
		return
	}
	s.bytesPaused.Store(false)
	resume := map[string][]int32{}
	for _, p := range s.d.Partitions() {
		p.Lock()
		if p.X.paused.Load() && p.State == kafkacore.Active && p.Tr.Unfinished() <= s.cfg.MaxInFlight/2 {
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
// (kafkagroup.ErrCommitFailed) unless the group refused it because it had moved on
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
	return s.stop.Wait(ctx, "franzsource", s.groupID, s.cfg.Logger)
}

// shutdown runs once, owned by Close: after the poll loop and the ticker
// stop it commits, then closes the group client (leaving the group, which
// releases every partition through onRevoked) and the producer. It marks
// the stop done last, which Close waits for.
func (s *Source) shutdown() {
	<-s.pollDone
	<-s.tickDone
	s.commitMu.Lock()
	// A member rejoining the group cannot commit until its join and sync
	// are done, which the broker ends within the rebalance timeout: a
	// commit still waiting then is one the group has moved past.
	err := s.commit(context.Background(), min(commitTimeout, s.cfg.Rebalance), s.owned())
	s.commitMu.Unlock()
	if err != nil && groupMovedOn(err) {
		// Not a failed stop: the group dropped this member (its session
		// ended, or a rebalance ended its generation) and the partitions'
		// next owner redoes what was not committed, answered by dedup.
		s.cfg.Logger.Warn("franzsource: the group moved on before the final commit; the partitions' next owner reads the uncommitted messages again",
			"group", s.groupID, "error", err.Error())
		err = nil
	}
	s.stop.Final(err)
	s.cl.CloseAllowingRebalance()
	s.prod.Close()
	_ = s.tel.Unregister()
	s.stop.Done()
}

func value(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
