package franztxn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/kgox"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/franzsource"
)

const instrumentationName = "github.com/onceq/onceq/franztxn"

// Processor consumes topics as a member of a consumer group and, for each
// poll, runs the handler over the records and commits the records the
// handler returned (Result.Outbox) with the consumed offsets in one Kafka
// transaction. Make one with New and run it with Run.
type Processor struct {
	cfg    config
	group  string
	topics []string
	h      consumer.Handler
	sess   *kgo.GroupTransactSession

	// revoked: partitions were revoked or lost since the last End, so the
	// session will abort the next transaction it ends.
	revoked atomic.Bool

	knownMu sync.Mutex
	known   map[string]bool // output topics seen to exist

	ran       atomic.Bool
	closeOnce sync.Once

	txns      metric.Int64Counter
	committed metric.AddOption
	aborted   metric.AddOption
}

// New makes a Processor that reads topics from seeds, the bootstrap
// brokers, in group, and runs h over each record. transactionalID names
// this worker's producer to the brokers: give each running worker its
// own, and the same one again when that worker restarts (a pod's name in
// a StatefulSet, say), so that the restart fences the dead process and
// aborts its open transaction at once; a worker that comes back under
// another ID leaves the dead one's transaction to TransactionTimeout.
// New checks, within ctx, that the topics exist; the group is joined by
// Run.
func New(ctx context.Context, seeds []string, group string, topics []string, transactionalID string, h consumer.Handler, opts ...Option) (*Processor, error) {
	cfg := defaults()
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	switch {
	case len(seeds) == 0:
		return nil, invalidOption("no seed brokers")
	case group == "":
		return nil, invalidOption("no group")
	case len(topics) == 0 || slices.Contains(topics, ""):
		return nil, invalidOption("topics %q: none, or an empty name", topics)
	case transactionalID == "":
		return nil, invalidOption("no transactional ID")
	case h == nil:
		return nil, invalidOption("nil handler")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.logger = cfg.logger.With("transactional_id", transactionalID)
	p := &Processor{cfg: cfg, group: group, topics: slices.Clone(topics), h: h, known: map[string]bool{}}
	mp := cfg.meter
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	var err error
	if p.txns, err = mp.Meter(instrumentationName).Int64Counter("onceq.kafka.transactions",
		metric.WithDescription("Kafka transactions ended, by result: committed (outputs and offsets) or aborted (neither; the records are read again).")); err != nil {
		return nil, fmt.Errorf("franztxn: metrics: %w", err)
	}
	g := attribute.String("messaging.consumer.group.name", group)
	p.committed = metric.WithAttributes(g, attribute.String("onceq.result", "committed"))
	p.aborted = metric.WithAttributes(g, attribute.String("onceq.result", "aborted"))

	kopts := append(slices.Clone(cfg.clientOpts),
		kgo.SeedBrokers(seeds...),
		kgo.WithLogger(kgox.Logger{L: cfg.logger}),
		kgo.ConsumerGroup(group),
		kgo.TransactionalID(transactionalID),
		kgo.TransactionTimeout(cfg.txnTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// No revoke runs between a poll and AllowRebalance, which Run
		// calls only once the transaction has ended: a transaction never
		// straddles a rebalance, so a revoke never has to abort one.
		kgo.BlockRebalanceOnPoll(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.HeartbeatInterval(cfg.heartbeat), kgo.SessionTimeout(cfg.session), kgo.RebalanceTimeout(cfg.rebalance),
		kgo.FetchMaxWait(cfg.fetchMaxWait),
		kgo.OnPartitionsAssigned(p.onAssigned), kgo.OnPartitionsRevoked(p.onRevoked), kgo.OnPartitionsLost(p.onLost),
	)
	if p.sess, err = kgo.NewGroupTransactSession(kopts...); err != nil {
		return nil, invalidOption("client: %v", err)
	}
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		cctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	}
	defer cancel()
	if err := p.checkTopics(cctx, topics); err != nil {
		p.sess.Close()
		return nil, err
	}
	return p, nil
}

// Close releases a Processor whose Run was never called; Run closes its
// own on return. It is idempotent.
func (p *Processor) Close() { p.closeOnce.Do(p.sess.CloseAllowingRebalance) }

// Run joins the group and processes until ctx ends (it then returns nil,
// the transaction under way aborted, and leaves the group: it waits
// leaveWait at most for the leave, which a join or rebalance under way
// holds up, and the leave goes on after it returns) or a fault
// stops it: ErrFenced, ErrTransaction, or a *RecordError (a handler's
// permanent error, ErrWritesUnsupported, ErrUnknownTopic). A handler's
// other errors abort the transaction, and its records are handled again
// after RetryBackoff. Run may be called once.
func (p *Processor) Run(ctx context.Context) error {
	if !p.ran.CompareAndSwap(false, true) {
		return errors.New("franztxn: Run called twice")
	}
	defer p.closeWithin(leaveWait)
	p.sess.Client().AddConsumeTopics(p.topics...)
	attempt := 1
	for {
		fs := p.sess.PollRecords(ctx, p.cfg.maxPoll)
		if ctx.Err() != nil || fs.IsClientClosed() {
			p.sess.AllowRebalance()
			return nil
		}
		fs.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) {
				p.cfg.logger.Warn("franztxn: fetch failed", "topic", topic, "partition", partition, "error", err.Error())
			}
		})
		recs := fs.Records()
		if len(recs) == 0 {
			p.sess.AllowRebalance()
			continue
		}
		if p.revoked.Swap(false) {
			// A revoke or loss came between transactions, and the
			// session would abort the next one for it. An End with no
			// transaction open clears that and sets every partition back
			// to its committed offset, dropping what the client buffered
			// past it: the records just polled come again, and the work of
			// handling them is not thrown away by an abort.
			_, err := p.end(ctx, kgo.TryAbort)
			p.sess.AllowRebalance()
			if err != nil {
				return p.endError(err)
			}
			continue
		}
		err := p.transact(ctx, recs, attempt)
		p.sess.AllowRebalance()
		var rerr *RecordError
		switch {
		case err == nil:
			attempt = 1
			continue
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errAborted):
			continue // the group moved on: the records are read again
		case errors.As(err, &rerr), errors.Is(err, ErrFenced), errors.Is(err, ErrTransaction):
			return err
		}
		delay := min(p.cfg.retryBackoff<<min(attempt-1, 16), p.cfg.maxRetryDelay)
		p.cfg.logger.Warn("franztxn: transaction aborted after a handler's error; its records are handled again",
			"group", p.group, "attempt", attempt, "retry_in", delay, "error", err.Error())
		attempt++
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// leaveWait bounds how long a stopping Run waits to leave the group.
const leaveWait = 5 * time.Second

// closeWithin closes the Processor, waiting up to d: a join or rebalance
// under way holds the leave up until the group answers, which a stop
// should not wait for. The close goes on meanwhile; a later Close waits
// for it.
func (p *Processor) closeWithin(d time.Duration) {
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Close()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		p.cfg.logger.Info("franztxn: stopped: left the group, the partitions given back; an open transaction was aborted",
			"group", p.group, "took", time.Since(start).Round(time.Millisecond))
	case <-t.C:
		p.cfg.logger.Warn("franztxn: stopped: leaving the group goes on after Run returned, held up by a join or rebalance under way; the partitions are given back once the group answers, and an open transaction was aborted",
			"group", p.group, "waited", d)
	}
}

// errAborted is a transaction the session aborted for the group's sake (a
// partition lost, a commit refused by a rebalance).
var errAborted = errors.New("franztxn: transaction aborted by the group")

// end ends the transaction (or, with none open, clears the session's
// revoke mark and sets the partitions back to their committed offsets).
// Cancelling an End leaves the client unsure whether the broker
// committed, so a shutdown does not cut it short: it is bounded by the
// rebalance timeout instead.
func (p *Processor) end(ctx context.Context, how kgo.TransactionEndTry) (bool, error) {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.rebalance)
	defer cancel()
	return p.sess.End(ectx, how)
}

// transact handles recs in one transaction and ends it.
func (p *Processor) transact(ctx context.Context, recs []*kgo.Record, attempt int) error {
	if err := p.sess.Begin(); err != nil {
		return p.endError(err)
	}
	outputs, herr := p.handleAll(ctx, recs, attempt)
	if herr == nil {
		// Flush before End: End commits whatever was produced, and a
		// record that failed must abort the transaction, not leave it.
		if err := p.sess.Client().Flush(ctx); err != nil {
			herr = err
		} else {
			herr = outputs.err()
		}
	}
	ev := TransactionEvent{Records: len(recs), Outputs: outputs.count()}
	p.revoked.Store(false) // End clears the session's own mark
	if herr != nil {
		_, err := p.end(ctx, kgo.TryAbort)
		ev.Err = herr
		p.report(ctx, ev)
		if fenced(herr) || err != nil && fenced(err) {
			return fmt.Errorf("%w: %w", ErrFenced, errors.Join(herr, err))
		}
		if err != nil {
			return p.endError(err)
		}
		return herr
	}
	committed, err := p.end(ctx, kgo.TryCommit)
	ev.Committed = committed
	if err != nil {
		ev.Err = err
		p.report(ctx, ev)
		return p.endError(err)
	}
	if !committed {
		p.report(ctx, ev)
		p.cfg.logger.Info("franztxn: transaction aborted: the group rebalanced or dropped this member; the records are read again",
			"group", p.group, "records", len(recs))
		return errAborted
	}
	p.report(ctx, ev)
	return nil
}

func (p *Processor) report(ctx context.Context, ev TransactionEvent) {
	if ev.Committed {
		p.txns.Add(ctx, 1, p.committed)
	} else {
		p.txns.Add(ctx, 1, p.aborted)
	}
	for _, h := range p.cfg.hooks {
		if h, ok := h.(HookKafkaTransaction); ok {
			h.OnKafkaTransaction(context.WithoutCancel(ctx), ev)
		}
	}
}

func fenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// endError classifies an error of Begin or End, which the client cannot
// recover from.
func (p *Processor) endError(err error) error {
	if fenced(err) {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return fmt.Errorf("%w: %w", ErrTransaction, err)
}

// produced follows the outputs of one transaction.
type produced struct {
	n     atomic.Int64
	mu    sync.Mutex
	first error
}

func (o *produced) count() int { return int(o.n.Load()) }

func (o *produced) err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.first
}

func (o *produced) fail(err error) {
	o.mu.Lock()
	if o.first == nil {
		o.first = err
	}
	o.mu.Unlock()
}

// handleAll runs the handler over recs, each partition's records in
// offset order, up to Concurrency partitions at once, and produces each
// record's outputs as its handler returns. The first error cancels the
// rest.
func (p *Processor) handleAll(ctx context.Context, recs []*kgo.Record, attempt int) (*produced, error) {
	type tp struct {
		topic string
		part  int32
	}
	var order []tp
	byPart := map[tp][]*kgo.Record{}
	for _, r := range recs {
		k := tp{r.Topic, r.Partition}
		if _, ok := byPart[k]; !ok {
			order = append(order, k)
		}
		byPart[k] = append(byPart[k], r)
	}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := &produced{}
	sem := make(chan struct{}, p.cfg.concurrency)
	var wg sync.WaitGroup
	for _, k := range order {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, r := range byPart[k] {
				if hctx.Err() != nil {
					return
				}
				if err := p.handle(hctx, ctx, r, attempt, out); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(hctx); err != nil && hctx.Err() != nil {
		return out, err
	}
	return out, nil
}

// handle runs the handler over r, within ctx, and produces its outputs
// within pctx: Run's, which outlives the handlers' until End.
func (p *Processor) handle(ctx, pctx context.Context, r *kgo.Record, attempt int, out *produced) (err error) {
	recErr := func(err error) error {
		return &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: err}
	}
	m := franzsource.ToMessage(r, attempt)
	key, err := p.cfg.key(m)
	if err != nil {
		return recErr(fmt.Errorf("franztxn: the record's key: %w", err))
	}
	m.IdempotencyKey = key
	res, err := p.call(ctx, m)
	if err != nil {
		if errors.Is(err, consumer.ErrPermanent) {
			return recErr(err)
		}
		return err
	}
	if len(res.Writes) > 0 {
		return recErr(ErrWritesUnsupported)
	}
	if res.Rejected {
		return nil // a rejected run sends nothing
	}
	for i, o := range res.Outbox {
		if err := p.destination(ctx, o.Destination); err != nil {
			return recErr(err)
		}
		out.n.Add(1)
		p.sess.Produce(pctx, record(o, outbox.ID(key, i)), func(_ *kgo.Record, err error) {
			switch {
			case err == nil:
			case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
				// No retry sends it: the input's fault, as a relay's
				// refused entry is.
				out.fail(recErr(&outbox.RefusedError{Destination: o.Destination, Reason: err.Error()}))
			default:
				out.fail(fmt.Errorf("franztxn: producing to %q: %w", o.Destination, err))
			}
		})
	}
	return nil
}

// call runs the handler; a panic is a bug of the handler, which no retry
// mends.
func (p *Processor) call(ctx context.Context, m *broker.Message) (res consumer.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = consumer.Permanent(fmt.Errorf("franztxn: the handler panicked: %v", v))
		}
	}()
	return p.h.Handle(ctx, m)
}

// record is the Kafka record of an output whose stable ID is id: the ID
// goes in the idempotency-key header, replacing one the handler set, so
// that an onceq consumer downstream keys it by it.
func record(o outbox.Message, id string) *kgo.Record {
	r := &kgo.Record{Topic: o.Destination, Value: o.Body}
	if o.OrderingKey != "" {
		r.Key = []byte(o.OrderingKey)
	}
	names := make([]string, 0, len(o.Headers))
	for k := range o.Headers {
		if k != broker.IdempotencyKeyAttribute {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	r.Headers = make([]kgo.RecordHeader, 0, len(names)+1)
	for _, k := range names {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(o.Headers[k])})
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: broker.IdempotencyKeyAttribute, Value: []byte(id)})
	return r
}

// destination checks that topic exists, asking the brokers once per topic.
func (p *Processor) destination(ctx context.Context, topic string) error {
	if topic == "" {
		return fmt.Errorf("%w: an output with no Destination", ErrUnknownTopic)
	}
	p.knownMu.Lock()
	ok := p.known[topic]
	p.knownMu.Unlock()
	if ok {
		return nil
	}
	return p.checkTopics(ctx, []string{topic})
}

// checkTopics proves, from the brokers' metadata, that topics exist.
func (p *Processor) checkTopics(ctx context.Context, topics []string) error {
	if err := kgox.CheckTopics(ctx, p.sess.Client(), "franztxn", topics, ErrUnknownTopic); err != nil {
		return err
	}
	p.knownMu.Lock()
	for _, t := range topics {
		p.known[t] = true
	}
	p.knownMu.Unlock()
	return nil
}

func (p *Processor) onAssigned(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
	p.cfg.logger.Info("franztxn: partitions assigned", "group", p.group, "partitions", assigned)
	for _, h := range p.cfg.hooks {
		if h, ok := h.(HookKafkaAssign); ok {
			h.OnKafkaAssign(ctx, assigned)
		}
	}
}

func (p *Processor) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	if len(revoked) == 0 {
		return // the session aborts nothing for an empty cooperative revoke
	}
	p.revoked.Store(true)
	p.cfg.logger.Info("franztxn: partitions revoked", "group", p.group, "partitions", revoked)
	p.seeRevoke(ctx, revoked, false)
}

func (p *Processor) onLost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	p.revoked.Store(true)
	p.cfg.logger.Warn("franztxn: partitions lost; the transaction under way, if any, aborts", "group", p.group, "partitions", lost)
	p.seeRevoke(ctx, lost, true)
}

func (p *Processor) seeRevoke(ctx context.Context, tps map[string][]int32, lost bool) {
	for _, h := range p.cfg.hooks {
		if h, ok := h.(HookKafkaRevoke); ok {
			h.OnKafkaRevoke(ctx, tps, lost)
		}
	}
}
