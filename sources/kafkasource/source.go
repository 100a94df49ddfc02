package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/onceq/onceq/internal/logref"

	kgo "github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/kafkacore"
)

// Headers a dead-letter record carries besides the original's own (the
// same for both Kafka sources):
//
//   - ReasonHeader: "onceq-dead-letter-reason", why it was dead-lettered
//   - OriginalTopicHeader: "onceq-original-topic"
//   - OriginalPartitionHeader: "onceq-original-partition", in decimal
//   - OriginalOffsetHeader: "onceq-original-offset", in decimal
const (
	ReasonHeader            = kafkacore.ReasonHeader
	OriginalTopicHeader     = kafkacore.OriginalTopicHeader
	OriginalPartitionHeader = kafkacore.OriginalPartitionHeader
	OriginalOffsetHeader    = kafkacore.OriginalOffsetHeader
)

// Source is a broker.Source reading topics as a member of a consumer
// group. It is safe for concurrent use.
type Source struct {
	cfg       config
	logs      *logref.Ref
	brokers   []string
	groupID   string
	topics    []string
	dialer    *kgo.Dialer
	transport *kgo.Transport
	group     *kgo.ConsumerGroup
	groupCfg  kgo.ConsumerGroupConfig // validated by New; the group is made at the first Receive
	dlq       *kgo.Writer             // nil without DeadLetterTopic
	// dlqMax is the dead-letter topic's max.message.bytes, learned by New.
	dlqMax  int
	kLog    kgo.Logger // nil unless debug logging is on
	kErrLog kgo.Logger

	ctx       context.Context // ended by Close
	cancel    context.CancelFunc
	loopDone  chan struct{}
	closeOnce sync.Once
	closed    chan struct{} // the loop ended and what it used is released
	// final is closed once the final commit's outcome (closeErr) is
	// known, or known to be none: what Close is still waiting for then is
	// the leave, which a rebalance under way can hold up.
	final     chan struct{}
	finalOnce sync.Once
	// joinOnce joins the group at the first Receive, or, run by Close
	// first, marks the source as never joined.
	joinOnce sync.Once

	// d queues, delivers and settles.
	d        kafkacore.Dispatcher[kgo.Message, partExt]
	mu       sync.Mutex
	closeErr error // the final commit's; under mu

	tel   *kafkacore.Telemetry
	hooks kafkacore.Hooks
}

// partition is one assigned partition within one generation. A partition
// assigned again in a later generation gets a new one.
type partition = kafkacore.Partition[kgo.Message, partExt]

// partExt is what this source keeps per partition besides the shared
// state.
type partExt struct {
	gen   *generation
	start int64         // the assignment's offset, or kgo.FirstOffset
	space chan struct{} // a slot freed: wakes the fetch loop
}

type generation struct {
	src   *Source
	kgen  *kgo.Generation
	id    int32
	parts []*partition
}

// New makes a member of group reading topics from brokers, each host:port.
// It checks, within ctx (bounded by 30 s when ctx has no deadline), that
// the brokers answer and the topics (and the dead-letter topic) exist. It
// joins the group at the first Receive, asynchronously: messages come once
// partitions are assigned. So a consumer that finds its store broken at
// start (Run checks it before the first Receive) never takes partitions
// from the group's healthy members.
func New(ctx context.Context, brokers []string, group string, topics []string, opts ...Option) (*Source, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	switch {
	case len(brokers) == 0:
		return nil, invalidOption("no brokers")
	case group == "":
		return nil, invalidOption("no group ID")
	case len(topics) == 0:
		return nil, invalidOption("no topics")
	}
	if err := kafkacore.CheckBrokers("kafkasource", brokers); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	hs, err := kafkacore.CollectHooks("kafka", ErrInvalidConfig, cfg.hooks)
	if err != nil {
		return nil, err
	}
	logs := logref.New(cfg.logger)
	cfg.logger = logs.Logger()
	s := &Source{
		logs: logs, cfg: cfg, hooks: hs, brokers: slices.Clone(brokers), groupID: group, topics: slices.Clone(topics),
		dialer: cfg.dialer,
		// The dead-letter writer goes through the transport: same TLS, SASL.
		transport: &kgo.Transport{TLS: cfg.dialer.TLS, SASL: cfg.dialer.SASLMechanism, ClientID: cfg.dialer.ClientID},
		loopDone:  make(chan struct{}),
		closed:    make(chan struct{}),
		final:     make(chan struct{}),
	}
	s.d.Init()
	s.d.ToMessage, s.d.OnDone, s.d.Errs = setMessage, s.spaceFreed, kafkacore.Errors{
		Foreign: ErrForeignMessage, NotInFlight: ErrNotInFlight, NoDeadLetterTopic: ErrNoDeadLetterTopic,
		DeadLetterFailed: ErrDeadLetterFailed}
	s.d.Hooks, s.d.Logger, s.d.DeadLetterTopic = hs, cfg.logger, cfg.dlqTopic
	s.kLog, s.kErrLog = kafkaLoggers(cfg.logger)
	if cfg.meter == nil {
		cfg.meter = otel.GetMeterProvider()
		s.cfg.meter = cfg.meter
	}
	tel, err := kafkacore.NewTelemetry(cfg.meter, instrumentationName, group, topics, cfg.dlqTopic, &s.d)
	if err != nil {
		return nil, fmt.Errorf("kafkasource: metrics: %w", err)
	}
	s.tel, s.d.Tel = tel, tel
	if err := s.Check(ctx); err != nil {
		_ = s.tel.Unregister()
		s.transport.CloseIdleConnections()
		return nil, err
	}
	t := cfg.timings
	s.groupCfg = kgo.ConsumerGroupConfig{
		ID: group, Brokers: s.brokers, Topics: s.topics, Dialer: s.dialer,
		HeartbeatInterval: t.heartbeat, SessionTimeout: t.session,
		RebalanceTimeout: t.rebalance, JoinGroupBackoff: t.joinBackoff,
		StartOffset: cfg.reset.startOffset(),
		Logger:      s.kLog, ErrorLogger: s.kErrLog,
	}
	if err := s.groupCfg.Validate(); err != nil {
		_ = s.tel.Unregister()
		s.transport.CloseIdleConnections()
		return nil, invalidOption("consumer group: %v", err)
	}
	if cfg.dlqTopic != "" {
		s.d.Produce = s.produceDeadLetter
		s.dlq = &kgo.Writer{
			Addr: kgo.TCP(s.brokers...), Topic: cfg.dlqTopic, Transport: s.transport,
			// The original key keeps a key's dead letters in one partition.
			Balancer:     &kgo.Hash{},
			RequiredAcks: kgo.RequireAll,
			// Dead letters are written one by one and waited for: a long
			// batch timeout would only add latency.
			BatchTimeout: cfg.dlqBatch,
			// As large as the topic takes, so that the client never refuses
			// what the broker would accept.
			BatchBytes: int64(s.dlqMax),
			Logger:     s.kLog, ErrorLogger: s.kErrLog,
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// join makes the consumer group, which joins in the background, and
// starts the loop that follows its generations; once, at the first
// Receive. After Close it does nothing.
func (s *Source) join() {
	s.joinOnce.Do(func() {
		g, err := kgo.NewConsumerGroup(s.groupCfg)
		if err != nil {
			// New validated the same configuration: not reached.
			s.cfg.logger.Error("kafkasource: joining the group", "group", s.groupID, "error", err.Error())
			close(s.loopDone)
			return
		}
		s.group = g
		go s.loop()
	})
}

func (s *Source) checkTopics(ctx context.Context, topics []string) error {
	var conn *kgo.Conn
	var err error
	var broker string
	for _, broker = range s.brokers {
		if conn, err = s.dialer.DialContext(ctx, "tcp", broker); err == nil {
			break
		}
		s.cfg.logger.Warn("kafkasource: dialing a broker failed", "broker", broker, "error", err.Error())
	}
	if err != nil {
		return fmt.Errorf("kafkasource: dialing %v: %w", s.brokers, ctxErr(ctx, err))
	}
	defer conn.Close()
	// The reads have no context of their own: ctx's end (its deadline or
	// a cancel) cuts them short.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	parts, err := conn.ReadPartitions(topics...)
	if errors.Is(err, kgo.UnknownTopicOrPartition) {
		return fmt.Errorf("%w: %v: %w", ErrUnknownTopic, topics, err)
	}
	if err != nil {
		return fmt.Errorf("kafkasource: reading partitions of %v from %s: %w", topics, broker, ctxErr(ctx, err))
	}
	for _, t := range topics {
		if !slices.ContainsFunc(parts, func(p kgo.Partition) bool { return p.Topic == t }) {
			return fmt.Errorf("%w: %q", ErrUnknownTopic, t)
		}
	}
	return nil
}

// ctxErr adds ctx's error to err when ctx ended, so that a read cut short
// by a cancelled context reports the cancellation, not a timeout.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

func kafkaLoggers(l *slog.Logger) (info, errs kgo.Logger) {
	bg := context.Background()
	if l.Enabled(bg, slog.LevelDebug) {
		info = kgo.LoggerFunc(func(msg string, args ...any) {
			l.Debug(fmt.Sprintf(msg, args...), "component", "kafka-go")
		})
	}
	if l.Enabled(bg, slog.LevelWarn) {
		errs = kgo.LoggerFunc(func(msg string, args ...any) {
			l.Warn(fmt.Sprintf(msg, args...), "component", "kafka-go")
		})
	}
	return info, errs
}

// Capabilities declares the configured ordering and Fingerprint as the
// default key, broker.KeyFromRecord (the consumer's WithKeyFunc still wins). Records that carry
// no idempotency-key header are keyed by a hash over their value, so the
// consumer need not hash the value a second time. Deliveries never time
// out: a record stays with this member until its partition is revoked.
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
// dead-letter topic if one is set, exist, and that the dead-letter topic
// takes every record the topics do (max.message.bytes). Every dial and
// read honours ctx, and is bounded by 30 s when ctx has no deadline.
func (s *Source) Check(ctx context.Context) error {
	ctx, cancel := kafkacore.BoundCheck(ctx)
	defer cancel()
	topics := slices.Clone(s.topics)
	if s.cfg.dlqTopic == "" {
		return s.checkTopics(ctx, topics)
	}
	topics = append(topics, s.cfg.dlqTopic)
	if err := s.checkTopics(ctx, topics); err != nil {
		return err
	}
	limits, err := s.maxMessageBytes(ctx, topics)
	if err != nil {
		return err
	}
	if s.dlqMax == 0 {
		s.dlqMax = limits[s.cfg.dlqTopic] // learned once, by New, before the writer exists
	}
	if err := kafkacore.CheckDeadLetterRoom(limits, s.topics, s.cfg.dlqTopic); err != nil {
		return fmt.Errorf("kafkasource: %w", err)
	}
	return nil
}

// maxMessageBytes reads the topics' max.message.bytes from the brokers.
func (s *Source) maxMessageBytes(ctx context.Context, topics []string) (map[string]int, error) {
	req := &kgo.DescribeConfigsRequest{}
	for _, t := range topics {
		req.Resources = append(req.Resources, kgo.DescribeConfigRequestResource{
			ResourceType: kgo.ResourceTypeTopic, ResourceName: t, ConfigNames: []string{kafkacore.MaxMessageBytesConfig}})
	}
	c := &kgo.Client{Addr: kgo.TCP(s.brokers...), Transport: s.transport}
	resp, err := c.DescribeConfigs(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("kafkasource: reading %s of %v from %v: %w", kafkacore.MaxMessageBytesConfig, topics, s.brokers, ctxErr(ctx, err))
	}
	out := make(map[string]int, len(topics))
	for _, r := range resp.Resources {
		if r.Error != nil {
			return nil, fmt.Errorf("kafkasource: reading %s of %q: %w", kafkacore.MaxMessageBytesConfig, r.ResourceName, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if n, err := strconv.Atoi(e.ConfigValue); e.ConfigName == kafkacore.MaxMessageBytesConfig && err == nil && n > 0 {
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

// Receive returns up to max messages, waiting for one. Partitions are
// served in turn; each in offset order.
func (s *Source) Receive(ctx context.Context, max int) ([]*broker.Message, error) {
	s.join()
	return s.d.Receive(ctx, max)
}

// Ack marks the message done in its partition's tracker; the offset is
// committed at the next interval once every message below it is done. An
// ack after its partition was released is dropped (see [LateAckHook]) and
// returns nil: the new owner redelivers the message and dedup answers it.
func (s *Source) Ack(ctx context.Context, m *broker.Message) error { return s.d.Ack(ctx, m) }

// Nack redelivers the message in place after delay, with Attempt+1; its
// offset is held meanwhile. On a revoked partition it is not redelivered
// here: the partition's next owner reads it again.
func (s *Source) Nack(ctx context.Context, m *broker.Message, delay time.Duration) error {
	return s.d.Nack(ctx, m, delay)
}

// DeadLetter produces the message to the dead-letter topic, with its key,
// value and headers and the reason and origin headers, then settles it so
// its partition moves on. Without DeadLetterTopic, or if the produce fails,
// the message stays in flight and an error says why.
func (s *Source) DeadLetter(ctx context.Context, m *broker.Message, reason string) error {
	return s.d.DeadLetter(ctx, m, reason)
}

func (s *Source) produceDeadLetter(ctx context.Context, orig kgo.Message, reason, topic string, partition int32, offset int64) error {
	in := make([]kafkacore.Header, len(orig.Headers))
	for i, h := range orig.Headers {
		in[i] = kafkacore.Header{Key: h.Key, Value: h.Value}
	}
	out := kafkacore.DeadLetterHeaders(in, len(orig.Key)+len(orig.Value), reason, topic, partition, offset, s.dlqMax)
	headers := make([]kgo.Header, len(out))
	for i, h := range out {
		headers[i] = kgo.Header{Key: h.Key, Value: h.Value}
	}
	return s.dlq.WriteMessages(ctx, kgo.Message{Key: orig.Key, Value: orig.Value, Headers: headers, Time: orig.Time})
}

// spaceFreed wakes p's fetch loop: one of its messages is done. Bytes are
// bounded over every partition, so while they are what bounds fetching,
// every loop is woken.
func (s *Source) spaceFreed(p *partition, _ int) {
	if s.d.Bytes() < s.cfg.maxInFlightBytes {
		for _, q := range s.d.Partitions() {
			wake(q)
		}
		return
	}
	wake(p)
}

func wake(p *partition) {
	select {
	case p.X.space <- struct{}{}:
	default:
	}
}

// Close stops dispatching, commits what is complete, leaves the group and
// stops every goroutine of the source. Messages not settled stay with the
// group: their offsets were not committed. Close is idempotent. It returns
// the final commit's error (ErrCommitFailed) unless the group refused it
// because it had moved on (this member dropped, its generation over): that
// is logged as a warning and Close returns nil, since the partitions' next
// owner reads the uncommitted messages again. If ctx ends first, the
// shutdown goes on in the background (bounded by kafka-go's timeouts) and
// Close returns ctx's error, unless only the leave was left: a rebalance
// under way holds a leave up until the group answers, and a stop whose
// commit is made is not failed by what the group does meanwhile.
func (s *Source) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.d.Close()
		s.cancel()
		s.joinOnce.Do(func() { close(s.loopDone) }) // never joined: nothing to leave
		go func() {
			<-s.loopDone
			if s.dlq != nil {
				_ = s.dlq.Close()
			}
			_ = s.tel.Unregister()
			s.transport.CloseIdleConnections()
			close(s.closed)
		}()
	})
	select {
	case <-s.closed:
	case <-ctx.Done():
		select {
		case <-s.final:
			s.cfg.logger.Warn("kafkasource: leaving the group goes on after Close returned: the group is rebalancing",
				"group", s.groupID, "error", ctx.Err().Error())
		default:
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeErr
}

// finalKnown marks the final commit's outcome as known.
func (s *Source) finalKnown() { s.finalOnce.Do(func() { close(s.final) }) }
