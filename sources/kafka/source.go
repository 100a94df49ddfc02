package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/kafkacore"
)

// Headers a dead-letter record carries besides the original's own (the
// same for both Kafka sources).
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
	brokers   []string
	groupID   string
	topics    []string
	dialer    *kgo.Dialer
	transport *kgo.Transport
	group     *kgo.ConsumerGroup
	dlq       *kgo.Writer // nil without DeadLetterTopic
	kLog      kgo.Logger  // nil unless debug logging is on
	kErrLog   kgo.Logger

	ctx       context.Context // ended by Close
	cancel    context.CancelFunc
	loopDone  chan struct{}
	closeOnce sync.Once
	finish    sync.Once

	mu       sync.Mutex
	parts    []*partition // dispatching now
	rr       int
	wake     chan struct{} // closed and replaced when messages arrive
	waiters  int
	closed   bool
	closeErr error // the final commit's

	tel   *kafkacore.Telemetry
	hooks kafkacore.Hooks
}

type partState int

const (
	active   partState = iota // dispatching
	draining                  // revoked: no dispatch, settles still count
	released                  // committed and handed back: settles are late
)

// partition is one assigned partition within one generation. A partition
// assigned again in a later generation gets a new one.
type partition struct {
	gen   *generation
	topic string
	id    int32
	start int64 // the assignment's offset, or kgo.FirstOffset
	state partState
	tr    *kafkacore.Tracker
	queue []*entry // fetched or redelivered, awaiting Receive, by offset
	// inFlight counts deliveries out with the consumer, not yet settled.
	inFlight int
	timers   map[*entry]*time.Timer // Nack delays
	space    chan struct{}          // a slot freed: wakes the fetch loop
	hwm      int64                  // highest log end offset a fetch reported
	lagSet   metric.ObserveOption   // the commit-lag gauge's attributes
}

// entry is one fetched record, from fetch until settled.
type entry struct {
	p        *partition
	msg      kgo.Message
	id       string
	attempts int
	cur      *delivery // the delivery out now; nil when not out
}

// delivery is one delivery of an entry: the Message's Handle. A settle is
// honoured only for the entry's current delivery of a live partition.
type delivery struct {
	e          *entry
	Generation int32
	Partition  int32
	Offset     int64
}

type generation struct {
	src     *Source
	kgen    *kgo.Generation
	id      int32
	parts   []*partition
	settled chan struct{} // a message of this generation was settled
}

// New joins group (asynchronously: messages come once partitions are
// assigned) to read topics from brokers. It first checks, within ctx, that
// the topics (and the dead-letter topic) exist.
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
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	hs, err := kafkacore.CollectHooks("kafka", ErrInvalidOption, cfg.hooks)
	if err != nil {
		return nil, err
	}
	s := &Source{
		cfg: cfg, hooks: hs, brokers: slices.Clone(brokers), groupID: group, topics: slices.Clone(topics),
		dialer: cfg.dialer,
		// The dead-letter writer goes through the transport: same TLS, SASL.
		transport: &kgo.Transport{TLS: cfg.dialer.TLS, SASL: cfg.dialer.SASLMechanism, ClientID: cfg.dialer.ClientID},
		wake:      make(chan struct{}),
		loopDone:  make(chan struct{}),
	}
	s.kLog, s.kErrLog = kafkaLoggers(cfg.logger)
	if cfg.meter == nil {
		cfg.meter = otel.GetMeterProvider()
		s.cfg.meter = cfg.meter
	}
	tel, err := kafkacore.NewTelemetry(cfg.meter, instrumentationName, group, topics, cfg.dlqTopic, s.lags)
	if err != nil {
		return nil, fmt.Errorf("kafka: metrics: %w", err)
	}
	s.tel = tel
	check := slices.Clone(topics)
	if cfg.dlqTopic != "" {
		check = append(check, cfg.dlqTopic)
	}
	if err := s.checkTopics(ctx, check); err != nil {
		_ = s.tel.Unregister()
		s.transport.CloseIdleConnections()
		return nil, err
	}
	t := cfg.timings
	g, err := kgo.NewConsumerGroup(kgo.ConsumerGroupConfig{
		ID: group, Brokers: s.brokers, Topics: s.topics, Dialer: s.dialer,
		HeartbeatInterval: t.heartbeat, SessionTimeout: t.session,
		RebalanceTimeout: t.rebalance, JoinGroupBackoff: t.joinBackoff,
		StartOffset: cfg.reset.startOffset(),
		Logger:      s.kLog, ErrorLogger: s.kErrLog,
	})
	if err != nil {
		_ = s.tel.Unregister()
		s.transport.CloseIdleConnections()
		return nil, invalidOption("consumer group: %v", err)
	}
	s.group = g
	if cfg.dlqTopic != "" {
		s.dlq = &kgo.Writer{
			Addr: kgo.TCP(s.brokers...), Topic: cfg.dlqTopic, Transport: s.transport,
			// The original key keeps a key's dead letters in one partition.
			Balancer:     &kgo.Hash{},
			RequiredAcks: kgo.RequireAll,
			// Dead letters are written one by one and waited for: a long
			// batch timeout would only add latency.
			BatchTimeout: cfg.dlqBatch,
			Logger:       s.kLog, ErrorLogger: s.kErrLog,
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.loop()
	return s, nil
}

func (s *Source) checkTopics(ctx context.Context, topics []string) error {
	var conn *kgo.Conn
	var err error
	for _, b := range s.brokers {
		if conn, err = s.dialer.DialContext(ctx, "tcp", b); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("kafka: dialing %v: %w", s.brokers, err)
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	parts, err := conn.ReadPartitions(topics...)
	if errors.Is(err, kgo.UnknownTopicOrPartition) {
		return fmt.Errorf("%w: %v: %w", ErrUnknownTopic, topics, err)
	}
	if err != nil {
		return fmt.Errorf("kafka: reading partitions of %v: %w", topics, err)
	}
	for _, t := range topics {
		if !slices.ContainsFunc(parts, func(p kgo.Partition) bool { return p.Topic == t }) {
			return fmt.Errorf("%w: %q", ErrUnknownTopic, t)
		}
	}
	return nil
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
// default key (the consumer's WithKeyFunc still wins). Records that carry
// no idempotency-key header are keyed by a hash over their value, so the
// consumer need not hash the value a second time. Deliveries never time
// out: a record stays with this member until its partition is revoked.
func (s *Source) Capabilities() broker.Capabilities {
	return broker.Capabilities{Ordering: s.cfg.ordering, DefaultKey: Fingerprint, KeyCoversBody: kafkacore.KeyCoversBody,
		DeadLetter: s.cfg.dlqTopic != ""}
}

// Check proves the brokers can be reached and the topics, and the
// dead-letter topic if one is set, exist.
func (s *Source) Check(ctx context.Context) error {
	topics := slices.Clone(s.topics)
	if s.cfg.dlqTopic != "" {
		topics = append(topics, s.cfg.dlqTopic)
	}
	return s.checkTopics(ctx, topics)
}

// Extend does nothing: Kafka deliveries do not time out (Capabilities
// declares none, so the consumer never calls it).
func (s *Source) Extend(context.Context, *broker.Message, time.Duration) error { return nil }

// Receive returns up to max messages, waiting for one. Partitions are
// served in turn; each in offset order.
func (s *Source) Receive(ctx context.Context, max int) ([]*broker.Message, error) {
	max = min(max, 1<<16)
	if max < 1 {
		max = 1
	}
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, broker.ErrSourceClosed
		}
		if out := s.takeLocked(max); len(out) > 0 {
			s.mu.Unlock()
			return out, nil
		}
		wake := s.wake
		s.waiters++
		s.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			s.mu.Lock()
			if s.wake == wake {
				s.waiters--
			}
			s.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

func (s *Source) signalLocked() {
	if s.waiters == 0 {
		return
	}
	close(s.wake)
	s.wake, s.waiters = make(chan struct{}), 0
}

// takeLocked takes up to max queued entries, one partition at a time in
// turn, so that a busy partition does not starve the others.
func (s *Source) takeLocked(max int) []*broker.Message {
	n := len(s.parts)
	if n == 0 {
		return nil
	}
	var out []*broker.Message
	now := time.Now()
	for len(out) < max {
		took := false
		for i := 0; i < n && len(out) < max; i++ {
			p := s.parts[(s.rr+i)%n]
			if len(p.queue) == 0 {
				continue
			}
			e := p.queue[0]
			p.queue[0] = nil
			p.queue = p.queue[1:]
			out = append(out, s.deliverLocked(e, now))
			took = true
		}
		if !took {
			break
		}
	}
	s.rr = (s.rr + 1) % n
	return out
}

func (s *Source) deliverLocked(e *entry, now time.Time) *broker.Message {
	p := e.p
	e.attempts++
	d := &delivery{e: e, Generation: p.gen.id, Partition: p.id, Offset: e.msg.Offset}
	e.cur = d
	p.inFlight++
	return &broker.Message{
		ID:         e.id,
		Key:        string(e.msg.Key),
		Body:       e.msg.Value,
		Attributes: headerAttributes(e.msg.Headers),
		Attempt:    e.attempts,
		Origin:     broker.Origin{System: "kafka", Destination: p.topic, Partition: p.id, Offset: e.msg.Offset},
		ReceivedAt: now,
		Handle:     d,
	}
}

// current validates m's handle: it returns the delivery when m is this
// source's current delivery of a live partition; late reports a partition
// already released.
func (s *Source) currentLocked(m *broker.Message) (d *delivery, late bool, err error) {
	d, ok := m.Handle.(*delivery)
	if !ok || d == nil || d.e.p.gen.src != s {
		return nil, false, permanent(fmt.Errorf("%w: %s", ErrForeignMessage, m.ID))
	}
	if d.e.p.state == released {
		return d, true, nil
	}
	if d.e.cur != d {
		return nil, false, permanent(fmt.Errorf("%w: %s", ErrNotInFlight, m.ID))
	}
	return d, false, nil
}

// settledLocked takes d's entry out of flight and wakes who waits on it.
func (s *Source) settledLocked(d *delivery, done bool) {
	e := d.e
	p := e.p
	e.cur = nil
	p.inFlight--
	if done {
		p.tr.MarkDone(e.msg.Offset)
		select {
		case p.space <- struct{}{}:
		default:
		}
	}
	select {
	case p.gen.settled <- struct{}{}:
	default:
	}
}

func (s *Source) late(ctx context.Context, d *delivery) {
	s.tel.Late(ctx, d.e.p.topic)
	for _, h := range s.hooks.LateAck {
		h.OnLateAck(ctx, d.e.p.topic, d.Partition, d.Offset, d.Generation)
	}
	s.cfg.logger.Debug("late settle dropped", "topic", d.e.p.topic, "partition", d.Partition,
		"offset", d.Offset, "generation", d.Generation)
}

// Ack marks the message done in its partition's tracker; the offset is
// committed at the next interval once every message below it is done. An
// ack after its partition was released is dropped (see [LateAckHook]) and
// returns nil: the new owner redelivers the message and dedup answers it.
func (s *Source) Ack(ctx context.Context, m *broker.Message) error {
	s.mu.Lock()
	d, late, err := s.currentLocked(m)
	if err != nil || late {
		s.mu.Unlock()
		if late {
			s.late(ctx, d)
		}
		return err
	}
	s.settledLocked(d, true)
	s.mu.Unlock()
	return nil
}

// Nack redelivers the message in place after delay, with Attempt+1; its
// offset is held meanwhile. On a revoked partition it is not redelivered
// here: the partition's next owner reads it again.
func (s *Source) Nack(_ context.Context, m *broker.Message, delay time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, late, err := s.currentLocked(m)
	if err != nil || late {
		return err
	}
	s.settledLocked(d, false)
	e, p := d.e, d.e.p
	if p.state != active {
		return nil
	}
	if delay <= 0 {
		s.requeueLocked(e)
		return nil
	}
	p.timers[e] = time.AfterFunc(delay, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := p.timers[e]; ok {
			delete(p.timers, e)
			if p.state == active {
				s.requeueLocked(e)
			}
		}
	})
	return nil
}

// requeueLocked puts e back in its partition's queue at its offset, so a
// redelivery does not fall behind its successors still queued.
func (s *Source) requeueLocked(e *entry) {
	p := e.p
	i, _ := slices.BinarySearchFunc(p.queue, e.msg.Offset, func(x *entry, off int64) int {
		return cmpInt64(x.msg.Offset, off)
	})
	p.queue = slices.Insert(p.queue, i, e)
	s.signalLocked()
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// DeadLetter produces the message to the dead-letter topic, with its key,
// value and headers and the reason and origin headers, then settles it so
// its partition moves on. Without DeadLetterTopic, or if the produce fails,
// the message stays in flight and an error says why.
func (s *Source) DeadLetter(ctx context.Context, m *broker.Message, reason string) error {
	if s.dlq == nil {
		return permanent(fmt.Errorf("%w: %s", ErrNoDeadLetterTopic, m.ID))
	}
	s.mu.Lock()
	d, late, err := s.currentLocked(m)
	if err == nil && late {
		err = fmt.Errorf("%w: %s", ErrPartitionRevoked, m.ID)
	}
	if err != nil {
		s.mu.Unlock()
		return err
	}
	orig := d.e.msg
	topic := d.e.p.topic
	s.mu.Unlock()

	in := make([]kafkacore.Header, len(orig.Headers))
	for i, h := range orig.Headers {
		in[i] = kafkacore.Header{Key: h.Key, Value: h.Value}
	}
	out := kafkacore.DeadLetterHeaders(in, reason, topic, d.Partition, d.Offset)
	headers := make([]kgo.Header, len(out))
	for i, h := range out {
		headers[i] = kgo.Header{Key: h.Key, Value: h.Value}
	}
	err = s.dlq.WriteMessages(ctx, kgo.Message{Key: orig.Key, Value: orig.Value, Headers: headers, Time: orig.Time})
	s.tel.DeadLettered(ctx, s.cfg.dlqTopic, err)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrDeadLetterFailed, m.ID, err)
	}
	for _, h := range s.hooks.DeadLetter {
		h.OnDeadLetter(ctx, topic, d.Partition, d.Offset, reason)
	}
	s.mu.Lock()
	_, late, err = s.currentLocked(m)
	if err == nil && !late {
		s.settledLocked(d, true)
	}
	s.mu.Unlock()
	if late {
		// Produced, but the partition went meanwhile: its new owner will
		// see the message again and decide again.
		s.late(ctx, d)
	}
	return err
}

// Close stops dispatching, commits what is complete, leaves the group and
// stops every goroutine of the source. Messages not settled stay with the
// group: their offsets were not committed. Close is idempotent; it returns
// ctx's error if ctx ends first (the shutdown goes on, bounded by kafka-go's
// timeouts), or the final commit's error (ErrCommitFailed).
func (s *Source) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.signalLocked()
		s.mu.Unlock()
		s.cancel()
	})
	select {
	case <-s.loopDone:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.finish.Do(func() {
		if s.dlq != nil {
			_ = s.dlq.Close()
		}
		_ = s.tel.Unregister()
		s.transport.CloseIdleConnections()
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeErr
}
