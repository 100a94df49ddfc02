package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/sources/internal/kafkacore"
	"github.com/onceq/onceq/sources/internal/kafkaopt"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// Source is a broker.Source reading topics as a member of a consumer
// group. It is safe for concurrent use. Its Capabilities, Ack, Nack,
// DeadLetter and Extend are those of both Kafka sources: see package
// kafkagroup.
type Source struct {
	methods
	cfg       config
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
	// stop follows the stop: the final commit's outcome, or that there is
	// none, then the loop's end and the release of what it used.
	stop *kafkacore.Stopping
	// joinOnce joins the group at the first Receive, or, run by Close
	// first, marks the source as never joined.
	joinOnce sync.Once

	// d queues, delivers and settles.
	d kafkacore.Dispatcher[kgo.Message, partExt]

	tel   *kafkacore.Telemetry
	hooks kafkacore.Hooks
}

// partition is one assigned partition within one generation. A partition
// assigned again in a later generation gets a new one.
type partition = kafkacore.Partition[kgo.Message, partExt]

// methods are the Source's Capabilities, Ack, Nack, DeadLetter and
// Extend.
type methods = kafkacore.Methods[kgo.Message, partExt]

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
	cfg := config{dialer: &kgo.Dialer{Timeout: 10 * time.Second, DualStack: true}}
	hs, logs, err := kafkacore.Setup("kafkasource", brokers, group, topics, kafkaopt.ApplyKafkaGo(opts, &cfg), &cfg)
	if err != nil {
		return nil, err
	}
	s := &Source{
		cfg: cfg, hooks: hs, brokers: slices.Clone(brokers), groupID: group, topics: slices.Clone(topics),
		dialer: cfg.dialer,
		// The dead-letter writer goes through the transport: same TLS, SASL.
		transport: &kgo.Transport{TLS: cfg.dialer.TLS, SASL: cfg.dialer.SASLMechanism, ClientID: cfg.dialer.ClientID},
		loopDone:  make(chan struct{}),
		stop:      kafkacore.NewStopping(),
	}
	s.methods = s.d.Configure(setMessage, s.spaceFreed, hs, &s.cfg.Settings, logs)
	// Every connection, of the group, the partitions' readers and the
	// dead-letter writer, reports to the consumer how its broker answers.
	dial := cfg.dialer.DialFunc
	if dial == nil {
		nd := &net.Dialer{LocalAddr: cfg.dialer.LocalAddr, FallbackDelay: cfg.dialer.FallbackDelay, KeepAlive: cfg.dialer.KeepAlive}
		if !cfg.dialer.DualStack {
			nd.FallbackDelay = -1
		}
		dial = nd.DialContext
	}
	cfg.dialer.DialFunc = kafkacore.WatchDial(&s.d.Status, dial)
	s.transport.Dial = cfg.dialer.DialFunc
	s.kLog, s.kErrLog = kafkaLoggers(cfg.Logger)
	tel, err := kafkacore.NewTelemetry(cfg.Meter, instrumentationName, group, topics, cfg.DeadLetterTopic, &s.d)
	if err != nil {
		return nil, fmt.Errorf("kafkasource: metrics: %w", err)
	}
	s.tel, s.d.Tel = tel, tel
	if err := s.Check(ctx); err != nil {
		_ = s.tel.Unregister()
		s.transport.CloseIdleConnections()
		return nil, err
	}
	s.groupCfg = kgo.ConsumerGroupConfig{
		ID: group, Brokers: s.brokers, Topics: s.topics, Dialer: s.dialer,
		HeartbeatInterval: cfg.Heartbeat, SessionTimeout: cfg.Session,
		RebalanceTimeout: cfg.Rebalance, JoinGroupBackoff: cfg.joinBackoff,
		StartOffset: startOffset(cfg.Reset),
		Logger:      s.kLog, ErrorLogger: s.kErrLog,
	}
	if err := s.groupCfg.Validate(); err != nil {
		_ = s.tel.Unregister()
		s.transport.CloseIdleConnections()
		return nil, invalidOption("consumer group: %v", err)
	}
	if cfg.DeadLetterTopic != "" {
		s.d.Produce = s.produceDeadLetter
		s.dlq = &kgo.Writer{
			Addr: kgo.TCP(s.brokers...), Topic: cfg.DeadLetterTopic, Transport: s.transport,
			// The original key keeps a key's dead letters in one partition.
			Balancer:     &kgo.Hash{},
			RequiredAcks: kgo.RequireAll,
			// Dead letters are written one by one and waited for: a long
			// batch timeout would only add latency.
			BatchTimeout: 5 * time.Millisecond,
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
			s.cfg.Logger.Error("kafkasource: joining the group", "group", s.groupID, "error", err.Error())
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
		s.cfg.Logger.Warn("kafkasource: dialing a broker failed", "broker", broker, "error", err.Error())
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
		return fmt.Errorf("%w: %v: %w", kafkagroup.ErrUnknownTopic, topics, err)
	}
	if err != nil {
		return fmt.Errorf("kafkasource: reading partitions of %v from %s: %w", topics, broker, ctxErr(ctx, err))
	}
	for _, t := range topics {
		if !slices.ContainsFunc(parts, func(p kgo.Partition) bool { return p.Topic == t }) {
			return fmt.Errorf("%w: %q", kafkagroup.ErrUnknownTopic, t)
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

// String names the source in the consumer's log lines: its group, topics
// and brokers.
func (s *Source) String() string {
	return kafkacore.SourceName("kafkasource", s.groupID, s.topics, strings.Join(s.brokers, ","))
}

// Check proves the brokers can be reached and the topics, and the
// dead-letter topic if one is set, exist, and that the dead-letter topic
// takes every record the topics do (max.message.bytes). Every dial and
// read honours ctx, and is bounded by 30 s when ctx has no deadline.
func (s *Source) Check(ctx context.Context) error {
	return kafkacore.Check(ctx, "kafkasource", s.brokers, s.cfg.Logger, s.topics, s.cfg.DeadLetterTopic, &s.dlqMax, s.checkTopics, s.maxMessageBytes)
}

// maxMessageBytes reads the topics' max.message.bytes from the brokers.
func (s *Source) maxMessageBytes(ctx context.Context, topics []string) (kafkacore.MessageLimits, error) {
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
	out := make(kafkacore.MessageLimits, len(topics))
	for _, r := range resp.Resources {
		if r.Error != nil {
			return nil, fmt.Errorf("kafkasource: reading %s of %q: %w", kafkacore.MaxMessageBytesConfig, r.ResourceName, r.Error)
		}
		for _, e := range r.ConfigEntries {
			out.Add(r.ResourceName, e.ConfigName, e.ConfigValue)
		}
	}
	return out.Fill(topics), nil
}

// Receive returns up to max messages, waiting for one. Partitions are
// served in turn; each in offset order.
func (s *Source) Receive(ctx context.Context, max int) ([]*broker.Message, error) {
	s.join()
	return s.d.Receive(ctx, max)
}

func (s *Source) produceDeadLetter(ctx context.Context, orig kgo.Message, reason, topic string, partition int32, offset int64) error {
	headers := kafkacore.DeadLetterHeaders(orig.Headers, len(orig.Key)+len(orig.Value), reason, topic, partition, offset, s.dlqMax)
	return s.dlq.WriteMessages(ctx, kgo.Message{Key: orig.Key, Value: orig.Value, Headers: headers, Time: orig.Time})
}

// spaceFreed wakes p's fetch loop: one of its messages is done. Bytes are
// bounded over every partition, so while they are what bounds fetching,
// every loop is woken.
func (s *Source) spaceFreed(p *partition, _ int) {
	if s.d.Bytes() < s.cfg.MaxInFlightBytes {
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
// the final commit's error (kafkagroup.ErrCommitFailed) unless the group refused it
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
			s.stop.Done()
		}()
	})
	return s.stop.Wait(ctx, "kafkasource", s.groupID, s.cfg.Logger)
}
