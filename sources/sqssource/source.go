package sqssource

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/internal/logref"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/awscreds"
	"github.com/onceq/onceq/internal/plainbody"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/internal/waitlog"
)

const (
	// maxVisibility is SQS's ceiling on a delivery's visibility, counted
	// from the ReceiveMessage that returned it.
	maxVisibility = 12 * time.Hour
	// maxRetention is the longest MessageRetentionPeriod SQS allows.
	maxRetention = 14 * 24 * time.Hour
	// maxBatch is the most entries (and messages) one SQS call takes.
	maxBatch = 10
	// releaseGrace is how long Close may still spend giving back
	// received messages once its context has ended.
	releaseGrace = 2 * time.Second
	// flushGrace is how long Close may still spend flushing the acks it
	// holds once its context has ended (a long poll in flight can use it
	// up): each one left unflushed brings a finished message back.
	flushGrace = 5 * time.Second
	// System is the Origin.System of every message of this source.
	System = "aws_sqs"
	// ReasonAttribute carries DeadLetter's reason on the dead-letter copy.
	ReasonAttribute = "onceq-dead-letter-reason"
	// OriginalIDAttribute carries the original MessageId on the copy.
	OriginalIDAttribute = "onceq-original-message-id"
)

// callOptions apply to every call this source makes.
//
// The SDK's retryer is switched off: the caller retries through a
// retry.Policy, and two stacked layers would multiply attempts and hide
// throttles.
//
// The request body is handed to net/http without its WriteTo method
// (package plainbody says why): for a ReceiveMessage the race it avoids
// loses the messages until their visibility runs out.
func callOptions(o *awssqs.Options) {
	o.Retryer = aws.NopRetryer{}
	if o.HTTPClient != nil {
		o.HTTPClient = plainbody.Client(o.HTTPClient)
	}
}

// Source delivers the messages of one SQS queue. It is safe for concurrent
// use. Create it with New; stop it with Close.
type Source struct {
	logs            *logref.Ref
	client          *awssqs.Client
	queueURL        string
	queueName       string
	fifo            bool
	visibility      time.Duration
	maxReceiveCount int
	retention       time.Duration
	dlq             *deadLetterQueue
	cfg             config
	log             *slog.Logger
	tel             *telemetry
	hooks           hooks

	stopPolls    context.CancelFunc // ends the pollers' waits for demand and their pauses
	stopReceives context.CancelFunc // cancels ReceiveMessage calls in flight
	pollers      sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	waiters []*waiter         // Receive calls waiting, oldest first
	ready   []*broker.Message // received after their Receive was served or gave up
	claimed int               // messages asked of SQS by polls in flight
	changed chan struct{}     // closed and replaced when demand may have changed

	deleter *deleter

	closeOnce sync.Once
	closeErr  error

	observers retry.Observers // the consumer's, told of each retry (Attach)
	// status is the consumer's broker.Runtime.Status (Attach), told how
	// the queue's endpoint answers each ReceiveMessage.
	status atomic.Pointer[func(broker.Status)]
}

type deadLetterQueue struct {
	url  string
	fifo bool
	// maxSize is the queue's MaximumMessageSize, learned by New and Check:
	// a dead-letter copy is cut to it.
	maxSize atomic.Int64
}

// waiter is one Receive call waiting for messages.
type waiter struct {
	max  int
	msgs []*broker.Message
	err  error
	done chan struct{} // closed once msgs or err is set
}

// New reads the queue's attributes (VisibilityTimeout, FifoQueue,
// RedrivePolicy), checks the dead-letter queue, and starts the pollers and
// the delete batcher. ctx bounds only these start-up calls.
func New(ctx context.Context, client *awssqs.Client, queueURL string, opts ...Option) (*Source, error) {
	if client == nil {
		return nil, invalidOption("nil client")
	}
	if queueURL == "" {
		return nil, invalidOption("empty queue URL")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logs := logref.New(cfg.logger)
	cfg.logger = logs.Logger()
	hs, err := collectHooks(cfg.hooks)
	if err != nil {
		return nil, err
	}
	s := &Source{
		logs:      logs,
		client:    client,
		queueURL:  queueURL,
		queueName: queueName(queueURL),
		cfg:       cfg,
		hooks:     hs,
		changed:   make(chan struct{}),
	}
	s.log = cfg.logger.With("queue", s.queueName)
	tel, err := newTelemetry(cfg.meter, s.queueName)
	if err != nil {
		return nil, fmt.Errorf("sqssource: metrics: %w", err)
	}
	s.tel = tel

	attrs, err := s.queueAttributes(ctx, queueURL)
	if err != nil {
		return nil, fmt.Errorf("sqssource: queue %s: %w", queueURL, err)
	}
	s.fifo = attrs[string(types.QueueAttributeNameFifoQueue)] == "true" || strings.HasSuffix(s.queueName, ".fifo")
	s.visibility = cfg.visibility
	if s.visibility == 0 {
		secs, err := strconv.Atoi(attrs[string(types.QueueAttributeNameVisibilityTimeout)])
		if err != nil || secs < 1 {
			return nil, invalidOption("queue %s has VisibilityTimeout %q: set the VisibilityTimeout option",
				s.queueName, attrs[string(types.QueueAttributeNameVisibilityTimeout)])
		}
		s.visibility = time.Duration(secs) * time.Second
	}
	if secs, err := strconv.Atoi(attrs[string(types.QueueAttributeNameMessageRetentionPeriod)]); err == nil && secs > 0 {
		s.retention = time.Duration(secs) * time.Second
	} else {
		s.retention = maxRetention // unknown: assume the worst SQS allows
	}
	redriveARN, maxReceive, err := parseRedrivePolicy(attrs[string(types.QueueAttributeNameRedrivePolicy)])
	if err != nil {
		return nil, fmt.Errorf("sqssource: queue %s: %w", s.queueName, err)
	}
	s.maxReceiveCount = maxReceive
	if err := s.setupDeadLetterQueue(ctx, redriveARN); err != nil {
		return nil, err
	}

	// The background work outlives New's ctx but keeps its values.
	base := context.WithoutCancel(ctx)
	pollCtx, stop := context.WithCancel(base)
	s.stopPolls = stop
	recvCtx, stopReceives := context.WithCancel(base)
	s.stopReceives = stopReceives
	s.deleter = newDeleter(base, s)
	for range cfg.pollers {
		s.pollers.Add(1)
		go s.poll(pollCtx, recvCtx)
	}
	s.log.Debug("sqs source started", "fifo", s.fifo, "visibility", s.visibility,
		"max_receive_count", s.maxReceiveCount, "dead_letter_queue", s.DeadLetterQueueURL())
	return s, nil
}

func (s *Source) queueAttributes(ctx context.Context, url string) (map[string]string, error) {
	// An endpoint that takes the connection and never answers fails no
	// call until ctx ends: said while it lasts, naming the queue.
	defer waitlog.Say(ctx, s.log, "sqssource: waiting for the queue's endpoint to answer GetQueueAttributes",
		slog.String("queue_url", url))()
	var out *awssqs.GetQueueAttributesOutput
	err := s.cfg.policy.Do(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
			QueueUrl:       aws.String(url),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
		}, callOptions)
		return awscreds.Explain(err)
	}, s.onRetry(ctx, "GetQueueAttributes"))
	if err != nil {
		return nil, err
	}
	return out.Attributes, nil
}

// setupDeadLetterQueue picks where DeadLetter sends: the explicit option,
// else the redrive policy's target. Sending there ourselves, rather than
// waiting for SQS to move the message after maxReceiveCount receives,
// carries the reason and spares the handler the extra attempts.
func (s *Source) setupDeadLetterQueue(ctx context.Context, redriveARN string) error {
	url := s.cfg.dlqURL
	if url == "" && redriveARN != "" {
		resolved, err := s.resolveQueueARN(ctx, redriveARN)
		if err != nil {
			// Said now, with SQS's answer: started without it, the source
			// would only seem to have no dead-letter queue at all.
			return fmt.Errorf("sqssource: queue %s: cannot look up the dead-letter queue %s of its redrive policy (it must be in the same account and region): %w",
				s.queueName, redriveARN, err)
		}
		url = resolved
	}
	if url == "" {
		return nil
	}
	attrs, err := s.queueAttributes(ctx, url)
	if err != nil {
		return fmt.Errorf("sqssource: dead-letter queue %s: %w", url, err)
	}
	fifo := attrs[string(types.QueueAttributeNameFifoQueue)] == "true" || strings.HasSuffix(queueName(url), ".fifo")
	if s.fifo && !fifo {
		return invalidOption("dead-letter queue %s of FIFO queue %s must be FIFO too", url, s.queueName)
	}
	s.dlq = &deadLetterQueue{url: url, fifo: fifo}
	s.dlq.maxSize.Store(int64(maxMessageSize(attrs)))
	return nil
}

// resolveQueueARN turns arn:aws:sqs:REGION:ACCOUNT:NAME into a queue URL.
func (s *Source) resolveQueueARN(ctx context.Context, arn string) (string, error) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" {
		return "", fmt.Errorf("sqssource: not an SQS queue ARN: %q", arn)
	}
	in := &awssqs.GetQueueUrlInput{QueueName: aws.String(parts[5])}
	if parts[4] != "" {
		in.QueueOwnerAWSAccountId = aws.String(parts[4])
	}
	var out *awssqs.GetQueueUrlOutput
	err := s.cfg.policy.Do(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.client.GetQueueUrl(ctx, in, callOptions)
		return awscreds.Explain(err)
	}, s.onRetry(ctx, "GetQueueUrl"))
	if err != nil {
		return "", err
	}
	return aws.ToString(out.QueueUrl), nil
}

// parseRedrivePolicy reads {"deadLetterTargetArn": ..., "maxReceiveCount": N};
// AWS writes the count as a string, some tools as a number.
func parseRedrivePolicy(raw string) (arn string, maxReceive int, err error) {
	if raw == "" {
		return "", 0, nil
	}
	var p struct {
		DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return "", 0, fmt.Errorf("RedrivePolicy %q: %w", raw, err)
	}
	if len(p.MaxReceiveCount) > 0 {
		count := strings.Trim(string(p.MaxReceiveCount), `"`)
		if maxReceive, err = strconv.Atoi(count); err != nil {
			return "", 0, fmt.Errorf("RedrivePolicy maxReceiveCount %s: %w", p.MaxReceiveCount, err)
		}
	}
	return p.DeadLetterTargetArn, maxReceive, nil
}

// queueName is the last path element of a queue URL.
func queueName(url string) string {
	url = strings.TrimRight(url, "/")
	if i := strings.LastIndexByte(url, '/'); i >= 0 {
		return url[i+1:]
	}
	return url
}

// QueueURL is the URL of the source's queue.
func (s *Source) QueueURL() string { return s.queueURL }

// FIFO reports whether the queue is a FIFO queue.
func (s *Source) FIFO() bool { return s.fifo }

// MaxReceiveCount is the queue's RedrivePolicy maxReceiveCount, 0 when it
// has none. When set, SQS moves a message to its dead-letter queue on its
// own once it has been received that many times: keep the consumer's
// MaxAttempts below it so that the consumer dead-letters first, with a
// reason.
func (s *Source) MaxReceiveCount() int { return s.maxReceiveCount }

// DeadLetterQueueURL is where DeadLetter sends, "" when nowhere.
func (s *Source) DeadLetterQueueURL() string {
	if s.dlq == nil {
		return ""
	}
	return s.dlq.url
}

// Capabilities declares the queue's visibility timeout as the delivery
// timeout (extended while a handler runs), its MessageRetentionPeriod as
// the redelivery window (COMPLETED records are kept longer), whether a
// dead-letter queue is known, and, on a FIFO queue, ordering by
// MessageGroupId.
func (s *Source) Capabilities() broker.Capabilities {
	c := broker.Capabilities{DeliveryTimeout: s.visibility, RedeliveryWindow: s.retention, DeadLetter: s.dlq != nil}
	if s.fifo {
		c.Ordering = broker.OrderByKey
	}
	return c
}

// Attach implements broker.Source: the Source logs to rt.Logger unless
// WithLogger gave it one, and tells rt.Observe of each SQS call it retries
// (a throttle slows the consumer's handlers), and rt.Status of each
// ReceiveMessage that fails or goes unanswered past its long poll, and of
// the answers. Its commits are never held, so rt.CommitHold does not
// apply.
func (s *Source) Attach(rt broker.Runtime) {
	s.logs.Inherit(rt.Logger)
	s.observers.Add(rt.Observe)
	if rt.Status != nil {
		s.status.Store(&rt.Status)
	}
}

// pollAnswerMargin is how long past its long-poll wait a ReceiveMessage
// may go unanswered before the queue's endpoint is reported failing.
const pollAnswerMargin = 10 * time.Second

// waitReceive is what a ReceiveMessage is reported as waiting for.
const waitReceive = "ReceiveMessage"

// report tells the consumer, once attached, how the endpoint answered.
func (s *Source) report(err error) {
	if f := s.status.Load(); f != nil {
		(*f)(broker.Status{Broker: s.queueURL, Waiting: waitReceive, Err: err})
	}
}

// String names the source in the consumer's log lines: its queue URL.
func (s *Source) String() string { return "sqssource: queue " + s.queueURL }

// Check reads the queue's attributes, and the dead-letter queue's, to
// prove both can still be reached, and that the dead-letter queue takes
// every message the queue does (MaximumMessageSize).
func (s *Source) Check(ctx context.Context) error {
	attrs, err := s.queueAttributes(ctx, s.queueURL)
	if err != nil {
		return fmt.Errorf("sqssource: queue %s: %w", s.queueName, err)
	}
	if s.dlq != nil {
		dattrs, err := s.queueAttributes(ctx, s.dlq.url)
		if err != nil {
			return fmt.Errorf("sqssource: dead-letter queue %s: %w", queueName(s.dlq.url), err)
		}
		src, dlq := maxMessageSize(attrs), maxMessageSize(dattrs)
		s.dlq.maxSize.Store(int64(dlq))
		if dlq < src {
			return fmt.Errorf("sqssource: dead-letter queue %s takes messages up to %d bytes (MaximumMessageSize), less than queue %s's %d: a message it accepts could not be dead-lettered",
				queueName(s.dlq.url), dlq, s.queueName, src)
		}
	}
	return nil
}

// defaultMaxMessageSize is SQS's MaximumMessageSize when a queue does not
// say: the smallest it has defaulted to.
const defaultMaxMessageSize = 256 * 1024

func maxMessageSize(attrs map[string]string) int {
	if n, err := strconv.Atoi(attrs[string(types.QueueAttributeNameMaximumMessageSize)]); err == nil && n > 0 {
		return n
	}
	return defaultMaxMessageSize
}

var _ broker.Source = (*Source)(nil)

// Receive waits until at least one message is available, ctx is done or
// the source is closed, and returns at most max messages.
func (s *Source) Receive(ctx context.Context, max int) ([]*broker.Message, error) {
	if max < 1 {
		return nil, fmt.Errorf("sqssource: Receive max %d: want at least 1", max)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, broker.ErrSourceClosed
	}
	s.dropStaleLocked(time.Now())
	if len(s.ready) > 0 {
		n := min(max, len(s.ready))
		msgs := make([]*broker.Message, n)
		copy(msgs, s.ready)
		s.ready = s.ready[n:]
		if len(s.ready) == 0 {
			s.ready = nil
		}
		s.mu.Unlock()
		return msgs, nil
	}
	w := &waiter{max: max, done: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.notifyLocked()
	s.mu.Unlock()

	select {
	case <-w.done:
		return w.msgs, w.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.done:
		// Served as we gave up: keep the messages for the next call
		// rather than strand them until their visibility runs out.
		s.ready = append(w.msgs, s.ready...)
	default:
		s.removeWaiterLocked(w)
		s.notifyLocked()
	}
	return nil, ctx.Err()
}

// dropStaleLocked forgets ready messages held for more than half their
// visibility: handing them out now would race their redelivery.
func (s *Source) dropStaleLocked(now time.Time) {
	keep := s.ready[:0]
	for _, m := range s.ready {
		if now.Sub(m.Handle.(*handle).receivedAt) < s.visibility/2 {
			keep = append(keep, m)
			continue
		}
		s.log.Debug("sqssource: dropping a received message no Receive took in time", "message_id", m.ID)
	}
	clear(s.ready[len(keep):])
	s.ready = keep
}

func (s *Source) removeWaiterLocked(w *waiter) {
	for i, x := range s.waiters {
		if x == w {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			return
		}
	}
}

func (s *Source) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// demandLocked is how many messages waiting Receive calls want that no
// poll in flight or ready message will cover.
func (s *Source) demandLocked() int {
	d := -s.claimed - len(s.ready)
	for _, w := range s.waiters {
		d += w.max
	}
	return d
}

// claim waits for unmet demand and claims up to one batch of it.
func (s *Source) claim(ctx context.Context) (int, bool) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return 0, false
		}
		// A poll for less than a batch waits while another is in flight:
		// what that one brings serves the Receive calls waiting, whose
		// next ask covers the rest, and a batch costs what one message
		// does.
		if d := s.demandLocked(); d >= maxBatch || d > 0 && s.claimed == 0 {
			n := min(maxBatch, d)
			s.claimed += n
			s.mu.Unlock()
			return n, true
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, false
		}
	}
}

// deliver hands what a poll for n messages brought to the waiting Receive
// calls, oldest first, and keeps the rest ready.
func (s *Source) deliver(ctx context.Context, n int, msgs []*broker.Message, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claimed -= n
	defer s.notifyLocked()
	if err != nil {
		// A failure no retry fixes (an invalid request; no such queue or
		// access denied, which are configuration faults) is the caller's
		// to see; transient ones are retried by the poller.
		class := retry.Classify(err)
		if ctx.Err() == nil && (class == retry.Permanent || class == retry.Misconfigured) && len(s.waiters) > 0 {
			w := s.waiters[0]
			s.waiters = s.waiters[1:]
			w.err = fmt.Errorf("sqssource: receive from %s: %w", s.queueName, err)
			close(w.done)
		}
		return
	}
	for len(msgs) > 0 && len(s.waiters) > 0 {
		w := s.waiters[0]
		s.waiters = s.waiters[1:]
		k := min(w.max, len(msgs))
		w.msgs = msgs[:k:k]
		msgs = msgs[k:]
		close(w.done)
	}
	s.ready = append(s.ready, msgs...)
}

// poll is one ReceiveMessage loop. Its owner is the Source: Close cancels
// ctx and waits for it. A ReceiveMessage runs on recvCtx, which Close
// cancels only when its own deadline comes: SQS hides what it hands a long
// poll even when the caller has gone, so a cancelled poll would hide the
// messages sent meanwhile for a whole visibility timeout.
func (s *Source) poll(ctx, recvCtx context.Context) {
	defer s.pollers.Done()
	failures := 0
	for {
		n, ok := s.claim(ctx)
		if !ok {
			return
		}
		in := &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(s.queueURL),
			MaxNumberOfMessages:         int32(n),
			WaitTimeSeconds:             int32(s.cfg.waitTime / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: s.systemAttributes(),
		}
		if s.cfg.visibility > 0 {
			in.VisibilityTimeout = int32(s.cfg.visibility / time.Second)
		}
		if ctx.Err() != nil {
			// Closing: no new long poll for Close to wait for.
			s.deliver(recvCtx, n, nil, nil)
			return
		}
		started := time.Now()
		unanswered := s.cfg.waitTime + pollAnswerMargin
		late := time.AfterFunc(unanswered, func() {
			s.report(fmt.Errorf("sqssource: no answer to ReceiveMessage on %s for %v", s.queueURL, unanswered))
		})
		out, err := s.client.ReceiveMessage(recvCtx, in, callOptions)
		late.Stop()
		err = awscreds.Explain(err)
		if ctx.Err() == nil {
			s.report(err)
		}
		var msgs []*broker.Message
		if err == nil {
			msgs = s.convert(out.Messages, started)
		}
		s.deliver(recvCtx, n, msgs, err)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failures++
			class := retry.Classify(err)
			s.log.Warn("sqssource: receive failed", "class", class, "failures", failures, "err", err)
			s.onRetry(ctx, "ReceiveMessage")(class, err)
			if !sleep(ctx, pollBackoff(failures)) {
				return
			}
		default:
			failures = 0
			if len(msgs) == 0 && s.cfg.waitTime == 0 && !sleep(ctx, s.cfg.emptyPollPause) {
				return
			}
		}
	}
}

// systemAttributes are the system attributes toMessage reads: asking for
// All would have SQS send, and the SDK decode, two more per message.
func (s *Source) systemAttributes() []types.MessageSystemAttributeName {
	names := []types.MessageSystemAttributeName{
		types.MessageSystemAttributeNameSentTimestamp,
		types.MessageSystemAttributeNameApproximateReceiveCount,
	}
	if s.fifo {
		names = append(names, types.MessageSystemAttributeNameMessageGroupId)
	}
	return names
}

// pollBackoff doubles from 100ms to 10s with consecutive failures.
func pollBackoff(failures int) time.Duration {
	d := 100 * time.Millisecond << min(failures-1, 7)
	return min(d, 10*time.Second)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Source) onRetry(ctx context.Context, op string) func(retry.Class, error) {
	return func(class retry.Class, err error) {
		for _, h := range s.hooks.retry {
			h.OnSQSRetry(ctx, op, class, err)
		}
		s.observers.Observe(class, err)
	}
}

// Close stops the pollers, waits for the long polls in flight to answer
// (at most WaitTime; they are cancelled when ctx ends first), gives back at
// once what they and earlier polls received and never handed out, and
// flushes pending acks on a context of its own, bounded by ctx, or by 5 s
// when the long polls used ctx up: a stop does not fail, nor finished
// messages come back, for how long SQS held a poll open. Messages
// handed out and not settled are left to their visibility timeout. Close
// is idempotent; later calls return the first one's result.
func (s *Source) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Source) close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for _, w := range s.waiters {
		w.err = broker.ErrSourceClosed
		close(w.done)
	}
	s.waiters = nil
	s.notifyLocked()
	s.mu.Unlock()

	s.stopPolls()
	polled := make(chan struct{})
	go func() {
		s.pollers.Wait()
		close(polled)
	}()
	select {
	case <-polled:
	case <-ctx.Done():
		s.log.Warn("sqssource: closing before the long polls in flight answered; what they receive stays hidden until its visibility timeout ends",
			"err", ctx.Err())
		s.stopReceives()
		<-polled
	}
	s.stopReceives()

	s.mu.Lock()
	ready := s.ready
	s.ready = nil
	s.mu.Unlock()
	s.release(ctx, ready)

	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), flushGrace)
		defer cancel()
	}
	return s.deleter.close(ctx)
}

// release makes never-handed-out messages visible again at once, so that
// closing does not hide them for a whole visibility timeout. Best effort,
// given a few seconds of its own when ctx has already ended.
func (s *Source) release(ctx context.Context, msgs []*broker.Message) {
	if len(msgs) == 0 {
		return
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), releaseGrace)
		defer cancel()
	}
	for batch := range slices.Chunk(msgs, maxBatch) {
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(batch))
		for i, m := range batch {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
				Id:                aws.String(strconv.Itoa(i)),
				ReceiptHandle:     aws.String(m.Handle.(*handle).receipt),
				VisibilityTimeout: 0,
			}
		}
		out, err := s.client.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{
			QueueUrl: aws.String(s.queueURL),
			Entries:  entries,
		}, callOptions)
		if err != nil {
			for range batch {
				s.tel.visibilityChanged(ctx, "Release", err)
			}
			s.log.Warn("sqssource: could not give back messages on close; they stay hidden until their visibility timeout ends",
				"messages", len(batch), "err", err)
			continue
		}
		for range out.Successful {
			s.tel.visibilityChanged(ctx, "Release", nil)
		}
		for _, f := range out.Failed {
			err := entryError(f)
			s.tel.visibilityChanged(ctx, "Release", err)
			if !isLostHandle(err) {
				s.log.Warn("sqssource: could not give back a message on close", "err", err)
			}
		}
	}
}
