package sharesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/kgox"
	"github.com/onceq/onceq/internal/logref"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/franzsource/internal/brokerwatch"
	"github.com/onceq/onceq/sources/internal/kafkacore"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// The broker settings the source reads, and Kafka's defaults for them.
const (
	lockConfig         = "group.share.record.lock.duration.ms"
	limitConfig        = "group.share.delivery.count.limit"
	resetConfig        = "share.auto.offset.reset"
	defaultLock        = 30 * time.Second
	defaultConnTimeout = 20 * time.Second // franz-go's ConnIdleTimeout
)

// Source is a broker.Source reading topics as members of a share group.
// It is safe for concurrent use.
type Source struct {
	cfg    config
	logs   *logref.Ref
	log    *slog.Logger
	group  string
	topics []string
	seeds  []string
	// seedList is seeds as the status reports name them.
	seedList string
	admin    *kgo.Client // checks, configs and dead letters; never joins
	// dlqMax is the dead-letter topic's max.message.bytes, learned by New.
	dlqMax int
	// lock is the acquisition lock duration; limit the group's
	// delivery-count limit (0: not known).
	lock  time.Duration
	limit int

	members []*member
	observe atomic.Pointer[func(retry.Class, error)]
	// status is the consumer's broker.Runtime.Status (Attach), told what
	// every client meets of the brokers and each poll's fetch errors.
	status kafkacore.Reporter

	mu      sync.Mutex
	ready   []*delivery            // polled, not yet received
	delayed map[*delivery]struct{} // nacked with a delay: held until it ends
	wake    chan struct{}          // a Receive waits on it for ready records

	ctx       context.Context // ended by Close
	cancel    context.CancelFunc
	loops     sync.WaitGroup // the members' poll loops
	startOnce sync.Once
	closeOnce sync.Once
	closeErr  error
	done      chan struct{} // the shutdown ended

	// flushed is set by the shutdown before it sends the last
	// acknowledgements: an accept or reject after it would never reach the
	// broker (leaving the group releases the record), so it is refused
	// rather than reported done. settleMu orders the two.
	settleMu sync.RWMutex
	flushed  bool
}

// member is one share-group member: one franz-go client, which polls again
// only once every record of its last poll is settled.
type member struct {
	s  *Source
	cl *kgo.Client

	mu   sync.Mutex
	open int           // records of the last poll not yet settled
	idle chan struct{} // receives when open falls to 0
}

// The states of a delivery.
const (
	held    int32 = iota // with the consumer
	delayed              // nacked with a delay, held by the source until it ends
	settled              // acked, released or rejected
)

// delivery is a broker.Message's Handle.
type delivery struct {
	rec   *kgo.Record
	m     *member
	state atomic.Int32
	timer *time.Timer // while delayed; guarded by Source.mu
	// renewed: the source renewed the lock while the record waited for a
	// Receive, so its AcquisitionDeadline no longer says when it ends.
	// Guarded by Source.mu.
	renewed bool
}

// New makes a share-group source for group, reading topics from seeds, the
// bootstrap brokers, each host:port. Within ctx (bounded by 30 s when ctx
// has no deadline) it checks that the topics and the dead-letter topic
// exist, reads the group's lock duration and delivery-count limit from the
// brokers, and, with FromEarliest, sets the group's
// share.auto.offset.reset. Its members join the group at the first
// Receive, so a consumer that finds its store broken at start takes no
// records.
func New(ctx context.Context, seeds []string, group string, topics []string, opts ...Option) (*Source, error) {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o.applyShare(&cfg)
		}
	}
	switch {
	case len(seeds) == 0:
		return nil, invalidOption("no brokers")
	case group == "":
		return nil, invalidOption("no group ID")
	case len(topics) == 0:
		return nil, invalidOption("no topics")
	}
	if err := kafkacore.CheckBrokers("sharesource", seeds); err != nil {
		return nil, err
	}
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	logs := logref.New(cfg.logger)
	s := &Source{cfg: cfg, logs: logs, log: logs.Logger(), group: group, topics: slices.Clone(topics), seeds: slices.Clone(seeds),
		seedList: strings.Join(seeds, ","),
		delayed:  map[*delivery]struct{}{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	common := s.clientOpts(seeds)
	var err error
	if s.admin, err = kgo.NewClient(append(common, kgo.ProducerLinger(0))...); err != nil {
		return nil, invalidOption("client: %v", err)
	}
	fail := func(err error) (*Source, error) {
		s.admin.Close()
		return nil, err
	}
	cctx, cancel := kafkacore.BoundCheck(ctx)
	defer cancel()
	if err := s.Check(cctx); err != nil {
		return fail(err)
	}
	if err := s.readGroupSettings(cctx); err != nil {
		return fail(err)
	}
	if cfg.dlq != "" {
		// The client's batch limit as large as the dead-letter topic
		// takes: a copy the broker accepts is never refused in the client.
		s.admin.Close()
		if s.admin, err = kgo.NewClient(append(common, kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(int32(s.dlqMax)))...); err != nil {
			return nil, invalidOption("client: %v", err)
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for range cfg.members {
		cl, err := kgo.NewClient(append(common,
			kgo.ShareGroup(group), kgo.ShareMaxRecords(int32(cfg.maxRecords)), kgo.ShareMaxRecordsStrict(),
			// A member holding records sends a renewal at least every
			// quarter lock; its connection must outlast a lock.
			kgo.ConnIdleTimeout(max(defaultConnTimeout, 2*s.lock)))...)
		if err != nil {
			s.cancel()
			s.closeMembers()
			return fail(invalidOption("share client: %v", err))
		}
		s.members = append(s.members, &member{s: s, cl: cl, idle: make(chan struct{}, 1)})
	}
	return s, nil
}

// String names the source in the consumer's log lines: its share group,
// topics and brokers.
func (s *Source) String() string {
	return kafkacore.SourceName("sharesource", s.group, s.topics, strings.Join(s.seeds, ","))
}

func (s *Source) clientOpts(seeds []string) []kgo.Opt {
	c := s.cfg
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID(c.clientID), kgo.WithLogger(kgox.Logger{L: s.log}),
		kgo.WithHooks(brokerwatch.Hooks{R: &s.status})}
	switch {
	case c.dial != nil:
		opts = append(opts, kgo.Dialer(c.dial))
	case c.tls != nil:
		opts = append(opts, kgo.DialTLSConfig(c.tls))
	}
	if len(c.sasl) > 0 {
		opts = append(opts, kgo.SASL(c.sasl...))
	}
	return opts
}

func (s *Source) closeMembers() {
	for _, m := range s.members {
		m.cl.Close()
	}
}

// readGroupSettings learns the lock duration and the delivery-count limit
// (the group's own values where set, else the brokers'), checks the limit
// against CheckAttempts, and sets share.auto.offset.reset for
// FromEarliest.
func (s *Source) readGroupSettings(ctx context.Context) error {
	brokerCfg, err := s.describe(ctx, kmsg.ConfigResourceTypeBroker, s.brokerID(ctx), lockConfig, limitConfig)
	if err != nil {
		// A broker that does not describe itself to this client (ACLs):
		// the defaults, or RecordLock, stand.
		s.log.Warn("sharesource: cannot read the brokers' share-group settings; assuming Kafka's defaults",
			"group", s.group, "error", err.Error())
	}
	groupCfg, err := s.describe(ctx, kmsg.ConfigResourceTypeGroupConfig, s.group, "share.record.lock.duration.ms", "share.delivery.count.limit", resetConfig)
	if err != nil {
		s.log.Debug("sharesource: cannot read the group's settings", "group", s.group, "error", err.Error())
	}
	pick := func(groupName, brokerName string) int {
		for _, v := range []string{groupCfg[groupName], brokerCfg[brokerName]} {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n
			}
		}
		return 0
	}
	// The brokers' lock is the one records have: a RecordLock longer than
	// it would make every polled record look prefetched and be released
	// at each poll, to be archived at the delivery-count limit unrun.
	s.lock = defaultLock
	switch ms := pick("share.record.lock.duration.ms", lockConfig); {
	case ms > 0:
		s.lock = time.Duration(ms) * time.Millisecond
		if s.cfg.lock > 0 && s.cfg.lock != s.lock {
			s.log.Warn("sharesource: RecordLock differs from the brokers' lock duration; using the brokers'",
				"group", s.group, "record_lock", s.cfg.lock, "broker_lock", s.lock)
		}
	case s.cfg.lock > 0:
		s.lock = s.cfg.lock
	}
	s.limit = pick("share.delivery.count.limit", limitConfig)
	if s.cfg.attempts > 0 && s.limit > 0 {
		if need := broker.ReceivesNeeded(s.cfg.attempts, s.cfg.leaseTTL, s.lock); s.limit < need {
			return &DeliveryLimitError{Group: s.group, Limit: s.limit, Need: need, MaxAttempts: s.cfg.attempts}
		}
	}
	if s.cfg.earliest && groupCfg[resetConfig] != "earliest" {
		return s.setEarliest(ctx)
	}
	if groupCfg[resetConfig] != "earliest" {
		s.log.Info("sharesource: the group starts at the end of the topics (share.auto.offset.reset is not earliest): records produced before its first member joined are not delivered",
			"group", s.group)
	}
	return nil
}

// brokerID is the ID of a broker, to describe its configs by; "" when
// the metadata does not say (kfake takes it).
func (s *Source) brokerID(ctx context.Context) string {
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, s.admin)
	if err != nil || len(resp.Brokers) == 0 {
		return ""
	}
	return strconv.Itoa(int(resp.Brokers[0].NodeID))
}

// describe reads configs of one resource; a config not set is "".
func (s *Source) describe(ctx context.Context, typ kmsg.ConfigResourceType, name string, configs ...string) (map[string]string, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName, r.ConfigNames = typ, name, configs
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, s.admin)
	if err != nil {
		return nil, fmt.Errorf("sharesource: reading %v of %s %q: %w", configs, typ, name, err)
	}
	out := map[string]string{}
	for _, rr := range resp.Resources {
		if err := kerr.ErrorForCode(rr.ErrorCode); err != nil {
			return nil, fmt.Errorf("sharesource: reading %v of %s %q: %w", configs, typ, name, err)
		}
		for _, c := range rr.Configs {
			if c.Value != nil {
				out[c.Name] = *c.Value
			}
		}
	}
	return out, nil
}

// setEarliest sets the group's share.auto.offset.reset to earliest.
func (s *Source) setEarliest(ctx context.Context) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, s.group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op, c.Value = resetConfig, kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("earliest")
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, s.admin)
	if err == nil {
		for _, rr := range resp.Resources {
			if err = kerr.ErrorForCode(rr.ErrorCode); err != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("sharesource: setting %s=earliest on group %q: %w", resetConfig, s.group, err)
	}
	return nil
}

// Check proves the brokers can be reached and the topics, and the
// dead-letter topic if one is set, exist, and that the dead-letter topic
// takes every record the topics do. It honours ctx, and is bounded by 30 s
// when ctx has no deadline.
func (s *Source) Check(ctx context.Context) error {
	return kafkacore.Check(ctx, "sharesource", s.seeds, s.log, s.topics, s.cfg.dlq, &s.dlqMax,
		func(ctx context.Context, topics []string) error {
			return kgox.CheckTopics(ctx, s.admin, "sharesource", topics, kafkagroup.ErrUnknownTopic)
		},
		func(ctx context.Context, topics []string) (kafkacore.MessageLimits, error) {
			out := make(kafkacore.MessageLimits, len(topics))
			for _, t := range topics {
				cfg, err := s.describe(ctx, kmsg.ConfigResourceTypeTopic, t, kafkacore.MaxMessageBytesConfig)
				if err != nil {
					return nil, err
				}
				out.Add(t, kafkacore.MaxMessageBytesConfig, cfg[kafkacore.MaxMessageBytesConfig])
			}
			return out.Fill(topics), nil
		})
}

// Capabilities: no order (a share group hands a partition's records to
// every member), half the acquisition lock as the delivery timeout (the
// consumer renews a held record's lock every quarter lock), Fingerprint as
// the default key, the dead-letter topic when set. A settled record is
// not replayable: a share group never delivers it again.
func (s *Source) Capabilities() broker.Capabilities {
	return broker.Capabilities{Ordering: broker.Unordered, DeliveryTimeout: s.lock / 2,
		DefaultKey: broker.KeyFromRecord, DeadLetter: s.cfg.dlq != ""}
}

// Attach implements broker.Source: the source logs to rt.Logger unless
// WithLogger gave it one, reports the poll failures it retries to
// rt.Observe, and reports to rt.Status what its clients meet of the
// brokers (a dial that failed, a request unanswered or answered with an
// error, a poll's fetch errors) and their answers, as the group sources
// do: the consumer's readiness follows the brokers. A share group holds no
// commit back, so CommitHold does not apply.
func (s *Source) Attach(rt broker.Runtime) {
	s.logs.Inherit(rt.Logger)
	s.status.Attach(rt.Status)
	if rt.Observe != nil {
		s.observe.Store(&rt.Observe)
	}
}

// Lock is the acquisition lock duration the source works with.
func (s *Source) Lock() time.Duration { return s.lock }

// DeliveryCountLimit is the group's delivery-count limit, 0 when the
// brokers did not say: past it the broker archives a record.
func (s *Source) DeliveryCountLimit() int { return s.limit }

// start subscribes the members, which joins the group, and starts their
// poll loops; once, at the first Receive. After Close it does nothing.
func (s *Source) start() {
	s.startOnce.Do(func() {
		for _, m := range s.members {
			m.cl.AddConsumeTopics(s.topics...)
			s.loops.Add(1)
			go m.loop()
		}
		s.loops.Add(1)
		go s.renewWaiting()
	})
}

// renewWaiting renews, every quarter lock, the lock of each record polled
// and not yet received: a record left to run out would go back to the
// group with its delivery count one higher, and past the group's limit
// the broker archives it unprocessed.
func (s *Source) renewWaiting() {
	defer s.loops.Done()
	t := time.NewTicker(s.lock / 4)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		for _, d := range s.ready {
			d.rec.Ack(kgo.AckRenew)
			d.renewed = true
		}
		s.mu.Unlock()
	}
}

// loop polls whenever every record of the member's last poll is settled:
// franz-go accepts, at the next poll, each record of the last one not
// settled yet, which would settle a record before its handler's
// COMPLETED commit.
func (m *member) loop() {
	s := m.s
	defer s.loops.Done()
	for {
		if !m.waitIdle() {
			return
		}
		fs := m.cl.PollRecords(s.ctx, s.cfg.maxRecords)
		if s.ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		failed := brokerwatch.Fetches(&s.status, s.seedList, fs, func(topic string, p int32, err error) {
			s.log.Warn("sharesource: fetch failed; retrying", "group", s.group, "topic", topic, "partition", p, "error", err.Error())
			if f := s.observe.Load(); f != nil {
				(*f)(retry.Classify(err), err)
			}
		}) > 0
		now := time.Now()
		var fresh []*delivery
		fs.EachRecord(func(r *kgo.Record) {
			if !s.fresh(r, now) {
				r.Ack(kgo.AckRelease)
				return
			}
			fresh = append(fresh, &delivery{rec: r, m: m})
		})
		if len(fresh) == 0 {
			if failed && !m.pause(250*time.Millisecond) {
				return
			}
			continue
		}
		m.mu.Lock()
		m.open = len(fresh)
		m.mu.Unlock()
		s.mu.Lock()
		s.ready = append(s.ready, fresh...)
		s.mu.Unlock()
		s.signal()
	}
}

// waitIdle waits until no record of the last poll is left unsettled;
// false once the source closes.
func (m *member) waitIdle() bool {
	for {
		m.mu.Lock()
		open := m.open
		m.mu.Unlock()
		if open == 0 {
			return true
		}
		select {
		case <-m.idle:
		case <-m.s.ctx.Done():
			return false
		}
	}
}

// pause waits d after a failed poll; false once the source closes.
func (m *member) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-m.s.ctx.Done():
		return false
	}
}

// settledOne counts one record of the last poll settled.
func (m *member) settledOne() {
	m.mu.Lock()
	m.open--
	idle := m.open == 0
	m.mu.Unlock()
	if idle {
		select {
		case m.idle <- struct{}{}:
		default:
		}
	}
}

// fresh reports that r's lock, as polled, has at least half its duration
// left: a record prefetched past that may have gone to another member, or
// would before the first renewal.
func (s *Source) fresh(r *kgo.Record, now time.Time) bool {
	dl := r.AcquisitionDeadline()
	return dl.IsZero() || dl.Sub(now) > s.lock/2
}

func (s *Source) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Receive waits for records and returns up to max. The source renews the
// lock of a record waiting for a Receive; one whose lock ended before its
// first renewal (it went back to the group) is not delivered.
func (s *Source) Receive(ctx context.Context, max int) ([]*broker.Message, error) {
	if max < 1 {
		// take would return nothing and wake this Receive again at once.
		return nil, fmt.Errorf("sharesource: Receive max %d: want at least 1", max)
	}
	if s.ctx.Err() != nil {
		return nil, broker.ErrSourceClosed
	}
	s.start()
	for {
		if msgs := s.take(max); len(msgs) > 0 {
			return msgs, nil
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.ctx.Done():
			return nil, broker.ErrSourceClosed
		}
		if s.ctx.Err() != nil {
			return nil, broker.ErrSourceClosed
		}
	}
}

func (s *Source) take(max int) []*broker.Message {
	now := time.Now()
	var msgs []*broker.Message
	var stale []*delivery
	s.mu.Lock()
	n := 0
	for n < len(s.ready) && len(msgs) < max {
		d := s.ready[n]
		n++
		if !d.renewed && !d.rec.AcquisitionDeadline().IsZero() && !now.Before(d.rec.AcquisitionDeadline()) {
			stale = append(stale, d) // gone back to the group already
			continue
		}
		msgs = append(msgs, message(d, now))
	}
	s.ready = s.ready[n:]
	more := len(s.ready) > 0
	s.mu.Unlock()
	if more {
		s.signal() // for the next Receive
	}
	for _, d := range stale {
		_ = d.finish(held, kgo.AckRelease)
	}
	return msgs
}

func message(d *delivery, now time.Time) *broker.Message {
	r := d.rec
	var attrs map[string]string
	if len(r.Headers) > 0 {
		attrs = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			attrs[h.Key] = string(h.Value)
		}
	}
	id, key := kafkacore.IDAndKey(r.Topic, r.Partition, r.Offset, r.Key)
	return &broker.Message{ID: id, OrderingKey: key, Body: r.Value, Attributes: attrs,
		Deliveries: max(int(r.DeliveryCount()), 1),
		Origin:     broker.Origin{System: "kafka", Destination: r.Topic, Partition: r.Partition, Offset: r.Offset},
		ReceivedAt: now, Handle: d}
}

// finish settles d with status if it is in state from; the member may
// poll again once its last record is settled.
func (d *delivery) finish(from int32, status kgo.AckStatus) error {
	if !d.state.CompareAndSwap(from, settled) {
		return kafkagroup.ErrNotInFlight
	}
	d.rec.Ack(status)
	d.m.settledOne()
	return nil
}

func (s *Source) delivery(m *broker.Message) (*delivery, error) {
	d, ok := m.Handle.(*delivery)
	if !ok || d == nil || d.m.s != s {
		return nil, kafkagroup.ErrForeignMessage
	}
	return d, nil
}

// settle finishes d with an accept or a reject, unless the source has
// already sent its last acknowledgements.
func (s *Source) settle(d *delivery, status kgo.AckStatus) error {
	s.settleMu.RLock()
	defer s.settleMu.RUnlock()
	if s.flushed {
		return broker.ErrSourceClosed
	}
	return d.finish(held, status)
}

// Ack accepts the record. The acknowledgement goes to the broker within a
// second, with others; Close sends what is pending. Once Close has sent
// them, Ack returns ErrSourceClosed: leaving the group released the
// record, which is delivered again.
func (s *Source) Ack(_ context.Context, m *broker.Message) error {
	d, err := s.delivery(m)
	if err != nil {
		return err
	}
	return s.settle(d, kgo.AckAccept)
}

// Nack releases the record, to be delivered again, to any member, with
// its delivery count one higher. A share group has no per-record delay:
// with a positive delay the source holds the record itself until the delay
// ends (renewing its lock), then releases it; its member polls again only
// then. A record released on its last delivery (DeliveryCountLimit) is
// archived by the broker, never delivered again: the source logs a warning
// naming it.
func (s *Source) Nack(_ context.Context, m *broker.Message, delay time.Duration) error {
	d, err := s.delivery(m)
	if err != nil {
		return err
	}
	if delay <= 0 {
		s.warnLast(d)
		return d.finish(held, kgo.AckRelease)
	}
	if !d.state.CompareAndSwap(held, delayed) {
		return kafkagroup.ErrNotInFlight
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		_ = d.finish(delayed, kgo.AckRelease)
		return nil
	}
	s.delayed[d] = struct{}{}
	s.holdLocked(d, time.Now().Add(delay))
	return nil
}

// holdLocked keeps d, delayed, until until, renewing its lock every
// quarter lock meanwhile, then releases it. The caller holds s.mu.
func (s *Source) holdLocked(d *delivery, until time.Time) {
	step := min(time.Until(until), s.lock/4)
	d.timer = time.AfterFunc(max(step, 0), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.delayed[d]; !ok {
			return // Close released it
		}
		if time.Now().Before(until) {
			d.rec.Ack(kgo.AckRenew)
			s.holdLocked(d, until)
			return
		}
		delete(s.delayed, d)
		s.warnLast(d)
		_ = d.finish(delayed, kgo.AckRelease)
	})
}

// warnLast logs a release of a record on its last delivery: the broker
// archives it, unrun, where no outcome of the store says so.
func (s *Source) warnLast(d *delivery) {
	if n := int(d.rec.DeliveryCount()); s.limit > 0 && n >= s.limit {
		r := d.rec
		s.log.Warn("sharesource: a record released on its last delivery is archived by the broker and not delivered again (group.share.delivery.count.limit)",
			"group", s.group, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "deliveries", n, "limit", s.limit)
	}
}

// DeadLetter produces the record to the DeadLetterTopic with its key,
// value and headers, the kafkagroup.ReasonHeader and the origin headers,
// then accepts it. Without a DeadLetterTopic it rejects the record: the
// broker archives it. A failed produce returns ErrDeadLetterFailed and
// leaves the record held; after Close it returns ErrSourceClosed, as Ack
// does.
func (s *Source) DeadLetter(ctx context.Context, m *broker.Message, reason string) error {
	d, err := s.delivery(m)
	if err != nil {
		return err
	}
	if d.state.Load() != held {
		return kafkagroup.ErrNotInFlight
	}
	if s.cfg.dlq == "" {
		return s.settle(d, kgo.AckReject)
	}
	r := d.rec
	rec := &kgo.Record{Topic: s.cfg.dlq, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
		Headers: kafkacore.DeadLetterHeaders(r.Headers, len(r.Key)+len(r.Value), reason, r.Topic, r.Partition, r.Offset, s.dlqMax)}
	if err := s.admin.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("sharesource: %w to %q: %w", kafkagroup.ErrDeadLetterFailed, s.cfg.dlq, err)
	}
	return s.settle(d, kgo.AckAccept)
}

// Extend renews the record's acquisition lock (a full lock duration from
// the broker's answer, whatever d is). Renewals are best-effort: a record
// whose lock ran out anyway goes to another member, where the store fences
// it.
func (s *Source) Extend(_ context.Context, m *broker.Message, _ time.Duration) error {
	d, err := s.delivery(m)
	if err != nil {
		return err
	}
	if d.state.Load() != held {
		return kafkagroup.ErrNotInFlight
	}
	d.rec.Ack(kgo.AckRenew)
	return nil
}

// Close stops receiving, releases the records held for a Nack delay,
// sends the acknowledgements pending, and leaves the group: every record
// not settled is released to the other members. It is idempotent; if ctx
// ends first the shutdown goes on in the background and Close returns
// ctx's error.
func (s *Source) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.startOnce.Do(func() {}) // never started: no loop to wait for
		go s.shutdown()
	})
	select {
	case <-s.done:
		return s.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Source) shutdown() {
	defer close(s.done)
	s.loops.Wait()
	s.mu.Lock()
	for d := range s.delayed {
		d.timer.Stop()
		_ = d.finish(delayed, kgo.AckRelease)
	}
	clear(s.delayed)
	s.mu.Unlock()
	s.settleMu.Lock()
	s.flushed = true
	s.settleMu.Unlock()
	var errs []error
	for _, m := range s.members {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := m.cl.FlushAcks(ctx); err != nil {
			errs = append(errs, fmt.Errorf("sharesource: group %q: sending acknowledgements: %w", s.group, err))
		}
		cancel()
		m.cl.Close()
	}
	s.admin.Close()
	s.closeErr = errors.Join(errs...)
}

// DeliveryLimitError is New's error, with CheckAttempts, for a group
// whose delivery-count limit would archive a record the consumer would
// still retry. It wraps kafkagroup.ErrInvalidConfig.
type DeliveryLimitError struct {
	Group       string
	Limit       int // the group's delivery-count limit
	Need        int // the deliveries MaxAttempts needs (broker.ReceivesNeeded)
	MaxAttempts int
}

func (e *DeliveryLimitError) Error() string {
	return fmt.Sprintf("sharesource: share group %q archives a record after %d deliveries (%s), but the consumer's MaxAttempts %d needs up to %d: raise the limit or lower MaxAttempts",
		e.Group, e.Limit, limitConfig, e.MaxAttempts, e.Need)
}

func (e *DeliveryLimitError) Unwrap() error { return kafkagroup.ErrInvalidConfig }
