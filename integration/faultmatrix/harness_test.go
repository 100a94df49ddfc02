package faultmatrix_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/sqssource"
)

// matrixCase is one fault. run drives it and returns the outcome it saw
// in a few words; the harness then checks what every case must hold.
type matrixCase struct {
	name string
	run  func(t *testing.T, f *fixture) string
	// slow cases (a minute or more) start first: go test runs GOMAXPROCS
	// parallel subtests at once, and the short ones fit beside them.
	slow bool
}

// cases is the matrix; files behind build tags add to it.
var cases []matrixCase

// TestFaultMatrix runs every case in parallel, so the matrix takes about
// as long as its longest case (a crashed holder's 60 s lease).
func TestFaultMatrix(t *testing.T) {
	dbEP, sqsEP := testenv.DynamoDBEndpoint(t), testenv.SQSEndpoint(t)
	sorted := append([]matrixCase(nil), cases...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].slow != sorted[j].slow {
			return sorted[i].slow
		}
		return sorted[i].name < sorted[j].name
	})
	for _, c := range sorted {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, dbEP, sqsEP)
			start := time.Now()
			outcome := c.run(t, f)
			if t.Failed() {
				return
			}
			f.checkAfterwards(t)
			runs, _ := f.rec.runStats()
			most, _ := f.rec.deliveryStats()
			t.Logf("faultmatrix: case=%s outcome=%q deliveries_max=%d handler_runs=%d effects=%d/%d wall=%s",
				c.name, outcome, most, runs, len(f.effects(t)), len(f.sentKeys()), time.Since(start).Round(100*time.Millisecond))
		})
	}
}

// fixture is one case's world: its own tables, queues and fault proxy, so
// that cases running in parallel never see each other's faults.
type fixture struct {
	t      *testing.T
	suffix string
	db     *ddb.Client // straight to DynamoDB Local: set-up and checks
	proxy  *faultproxy.Proxy
	pdb    *ddb.Client // through the proxy: what the consumer uses
	sqs    *awssqs.Client
	idem   string // the idempotency table
	ledger string // the business table
	queue  string
	dlq    string // "" when the queue has none
	rec    *recorder

	// maxDeliveries bounds any message's deliveries (default 2).
	maxDeliveries int
	// effectsIn, when set, reads the effects instead of the DynamoDB
	// business table (a case whose effects live in another store).
	effectsIn func(t *testing.T) map[string]int

	mu   sync.Mutex
	sent map[string]bool // idempotency key → valid (an effect is due)
}

func newFixture(t *testing.T, dbEP, sqsEP string) *fixture {
	var b [4]byte
	_, _ = rand.Read(b[:])
	f := &fixture{t: t, suffix: hex.EncodeToString(b[:]), rec: newRecorder(), maxDeliveries: 2, sent: map[string]bool{}}
	cfg := awstest.Config(t, "")
	f.db = ddb.NewFromConfig(cfg, func(o *ddb.Options) { o.BaseEndpoint = aws.String(dbEP) })
	f.proxy = faultproxy.Start(t, dbEP)
	f.pdb = ddb.NewFromConfig(cfg, func(o *ddb.Options) { o.BaseEndpoint = aws.String(f.proxy.URL()) })
	f.sqs = awssqs.NewFromConfig(cfg, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(sqsEP) })
	f.idem, f.ledger = "fm_idem_"+f.suffix, "fm_ledger_"+f.suffix
	return f
}

// tables creates the idempotency table (with opts) and the business table.
func (f *fixture) tables(opts ...dynamostore.TableOption) {
	f.t.Helper()
	f.idempotencyTable(opts...)
	f.ledgerTable()
}

func (f *fixture) idempotencyTable(opts ...dynamostore.TableOption) {
	f.t.Helper()
	if err := dynamostore.CreateTable(context.Background(), f.db, f.idem, opts...); err != nil {
		f.t.Fatalf("create %s: %v", f.idem, err)
	}
	f.dropLater(f.idem)
}

func (f *fixture) dropLater(table string) {
	f.t.Cleanup(func() {
		_, _ = f.db.DeleteTable(context.Background(), &ddb.DeleteTableInput{TableName: aws.String(table)})
	})
}

// ledgerTable creates the business table: one row per key, written with
// attribute_not_exists, so a second effect is refused and seen.
func (f *fixture) ledgerTable() {
	f.t.Helper()
	_, err := f.db.CreateTable(context.Background(), &ddb.CreateTableInput{TableName: aws.String(f.ledger),
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("k"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("k"), KeyType: ddbtypes.KeyTypeHash}}})
	if err != nil {
		f.t.Fatalf("create %s: %v", f.ledger, err)
	}
	f.dropLater(f.ledger)
}

// queues creates the queue, with visibility (0: the emulator's 30 s) and,
// when withDLQ, a dead-letter queue named in its redrive policy.
func (f *fixture) queues(visibility time.Duration, withDLQ bool) {
	f.t.Helper()
	attrs := map[string]string{}
	if visibility > 0 {
		attrs[string(sqstypes.QueueAttributeNameVisibilityTimeout)] = strconv.Itoa(int(visibility / time.Second))
	}
	if withDLQ {
		var arn string
		f.dlq, arn = f.createQueue("fm-dlq-"+f.suffix, nil)
		// High enough that SQS never moves a message itself: every dead
		// letter seen is the consumer's.
		attrs[string(sqstypes.QueueAttributeNameRedrivePolicy)] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"50"}`, arn)
	}
	f.queue, _ = f.createQueue("fm-"+f.suffix, attrs)
}

func (f *fixture) createQueue(name string, attrs map[string]string) (url, arn string) {
	f.t.Helper()
	ctx := context.Background()
	out, err := f.sqs.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		f.t.Fatalf("create queue %s: %v", name, err)
	}
	url = aws.ToString(out.QueueUrl)
	f.t.Cleanup(func() {
		_, _ = f.sqs.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	})
	a := f.queueAttrs(url, sqstypes.QueueAttributeNameQueueArn)
	return url, a[string(sqstypes.QueueAttributeNameQueueArn)]
}

func (f *fixture) queueAttrs(url string, names ...sqstypes.QueueAttributeName) map[string]string {
	f.t.Helper()
	out, err := f.sqs.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	if err != nil {
		f.t.Fatalf("attributes of %s: %v", url, err)
	}
	return out.Attributes
}

// messages counts a queue's messages: visible, in flight, delayed.
func (f *fixture) messages(url string) (visible, inFlight, delayed int) {
	f.t.Helper()
	a := f.queueAttrs(url, sqstypes.QueueAttributeNameApproximateNumberOfMessages,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible, sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed)
	n := func(name sqstypes.QueueAttributeName) int { v, _ := strconv.Atoi(a[string(name)]); return v }
	return n(sqstypes.QueueAttributeNameApproximateNumberOfMessages), n(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		n(sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed)
}

// held is how many messages the queue still has, in any state.
func (f *fixture) held() int {
	v, i, d := f.messages(f.queue)
	return v + i + d
}

// send sends one message per key, in batches of ten: body {"order":key},
// the key as its idempotency-key attribute. A key sent again is a
// duplicate delivery (a new SQS message, the same key and body).
func (f *fixture) send(keys ...string) {
	f.t.Helper()
	f.sendBodies(true, keys...)
}

// sendPoison sends messages the handler refuses for good: no effect is due.
func (f *fixture) sendPoison(keys ...string) {
	f.t.Helper()
	f.sendBodies(false, keys...)
}

func (f *fixture) sendBodies(valid bool, keys ...string) {
	f.t.Helper()
	for i := 0; i < len(keys); i += 10 {
		var entries []sqstypes.SendMessageBatchRequestEntry
		for j, k := range keys[i:min(i+10, len(keys))] {
			body := string(orderBody(k))
			if !valid {
				body = "poison"
			}
			entries = append(entries, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), MessageBody: aws.String(body),
				MessageAttributes: map[string]sqstypes.MessageAttributeValue{consumer.IdempotencyKeyAttribute: {
					DataType: aws.String("String"), StringValue: aws.String(k)}}})
		}
		out, err := f.sqs.SendMessageBatch(context.Background(), &awssqs.SendMessageBatchInput{QueueUrl: aws.String(f.queue), Entries: entries})
		if err != nil || len(out.Failed) > 0 {
			f.t.Fatalf("send: %v %v", err, out)
		}
	}
	f.mu.Lock()
	for _, k := range keys {
		f.sent[k] = valid
	}
	f.mu.Unlock()
}

// sentKeys are the keys whose effect is due.
func (f *fixture) sentKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ks []string
	for k, valid := range f.sent {
		if valid {
			ks = append(ks, k)
		}
	}
	return ks
}

// handler is the order-like handler: its one effect is a ledger row for
// its key, committed with the COMPLETED record. before, if set, runs first
// with the key's run number (1 first); an error from it is the handler's.
func (f *fixture) handler(before func(ctx context.Context, m *consumer.Message, run int) error) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		key := m.Attributes[consumer.IdempotencyKeyAttribute]
		run := f.rec.ran(key)
		if string(m.Body) == "poison" {
			return consumer.Result{}, consumer.Permanent(errors.New("not an order"))
		}
		if before != nil {
			if err := before(ctx, m, run); err != nil {
				return consumer.Result{}, err
			}
		}
		return consumer.Result{Response: []byte(`{"status":"booked"}`), RejectResponse: []byte(`{"status":"doubled"}`),
			Writes: []dedup.Write{dynamostore.Write{Put: &ddbtypes.Put{
				TableName:           aws.String(f.ledger),
				Item:                map[string]ddbtypes.AttributeValue{"k": &ddbtypes.AttributeValueMemberS{Value: key}},
				ConditionExpression: aws.String("attribute_not_exists(k)"),
			}}}}, nil
	})
}

// store is a DynamoDB store over the idempotency table, through the proxy.
func (f *fixture) store(opts ...dynamostore.Option) *dynamostore.Store {
	f.t.Helper()
	st, err := dynamostore.New(f.pdb, append([]dynamostore.Option{dynamostore.WithTable(f.idem), dynamostore.WithLogger(testLogger(f.t))}, opts...)...)
	if err != nil {
		f.t.Fatalf("dynamostore.New: %v", err)
	}
	return st
}

// source opens an SQS source on the case's queue; the consumer closes it.
func (f *fixture) source(opts ...sqssource.Option) *sqssource.Source {
	f.t.Helper()
	src, err := sqssource.New(context.Background(), f.sqs, f.queue,
		append([]sqssource.Option{sqssource.WaitTime(time.Second), sqssource.WithLogger(testLogger(f.t))}, opts...)...)
	if err != nil {
		f.t.Fatalf("sqssource.New: %v", err)
	}
	f.t.Cleanup(func() { _ = src.Close(context.Background()) })
	return src
}

// worker is one running consumer, named for the records.
type worker struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's answer, once done is closed
}

// start builds a consumer over the case's queue and store and runs it.
// Its outcomes and settles are recorded under name.
func (f *fixture) start(name string, store dedup.Store, h consumer.Handler, opts ...consumer.Option) *worker {
	f.t.Helper()
	c := f.newConsumer(name, f.source(), store, h, opts...)
	return f.run(name, c)
}

func (f *fixture) newConsumer(name string, src consumer.Source, store dedup.Store, h consumer.Handler, opts ...consumer.Option) *consumer.Consumer {
	f.t.Helper()
	opts = append([]consumer.Option{consumer.WithLogger(testLogger(f.t).With("worker", name)),
		consumer.WithHooks(workerHook{f.rec, name})}, opts...)
	c, err := consumer.New(src, store, h, opts...)
	if err != nil {
		f.t.Fatalf("consumer.New: %v", err)
	}
	return c
}

func (f *fixture) run(name string, c *consumer.Consumer) *worker {
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.err = c.Run(ctx)
	}()
	f.t.Cleanup(func() { _ = w.stop() })
	return w
}

// stop cancels the worker and returns what Run returned.
func (w *worker) stop() error {
	w.cancel()
	select {
	case <-w.done:
		return w.err
	case <-time.After(90 * time.Second):
		return fmt.Errorf("worker %s did not stop within 90s", w.name)
	}
}

// stopped reports whether Run has returned.
func (w *worker) stopped() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// wait waits for Run to return on its own, within d.
func (w *worker) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-w.done:
		return w.err
	case <-time.After(d):
		t.Fatalf("worker %s still running after %v", w.name, d)
		return nil
	}
}

// effects reads the business table: key → rows (a row per key at most:
// a second effect is refused by the row's condition and shows as a
// rejected outcome instead). A table not yet created holds none.
func (f *fixture) effects(t *testing.T) map[string]int {
	t.Helper()
	if f.effectsIn != nil {
		return f.effectsIn(t)
	}
	got := map[string]int{}
	p := ddb.NewScanPaginator(f.db, &ddb.ScanInput{TableName: aws.String(f.ledger), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		var missing *ddbtypes.ResourceNotFoundException
		if errors.As(err, &missing) {
			return got
		}
		if err != nil {
			t.Fatalf("scan %s: %v", f.ledger, err)
		}
		for _, it := range page.Items {
			got[it["k"].(*ddbtypes.AttributeValueMemberS).Value]++
		}
	}
	return got
}

// waitEffects waits until every valid key sent has its effect.
func (f *fixture) waitEffects(t *testing.T, d time.Duration) {
	t.Helper()
	want := len(f.sentKeys())
	waitFor(t, d, func() string {
		if n := len(f.effects(t)); n < want {
			return fmt.Sprintf("%d of %d effects (outcomes %s; last: %s)", n, want, f.rec.kinds(), f.rec.last())
		}
		return ""
	})
}

// checkAfterwards is what every case must hold once its fault is gone:
// every valid message's effect exactly once (none lost, none doubled),
// none dead-lettered, and no message delivered more than maxDeliveries
// times.
func (f *fixture) checkAfterwards(t *testing.T) {
	t.Helper()
	got := f.effects(t)
	for _, k := range f.sentKeys() {
		if got[k] != 1 {
			t.Errorf("key %.40s: effect %d times, want once", k, got[k])
		}
		delete(got, k)
	}
	for k := range got {
		t.Errorf("key %.40s: an effect no valid message asked for", k)
	}
	if n := f.rec.count(consumer.Rejected); n > 0 {
		t.Errorf("%d rejected outcomes: a second effect was attempted and refused by the ledger's condition", n)
	}
	if f.dlq != "" {
		f.checkDeadLetters(t)
	}
	if n := f.rec.count(consumer.DeadLettered); n > 0 && f.dlq != "" {
		t.Errorf("%d dead_lettered outcomes", n)
	}
	if most, hist := f.rec.deliveryStats(); most > f.maxDeliveries {
		t.Errorf("a message was delivered %d times, want at most %d (keys by deliveries: %v); outcomes:\n%s",
			most, f.maxDeliveries, hist, f.rec.timeline())
	}
}

// checkDeadLetters reads the dead-letter queue: it must hold nothing.
func (f *fixture) checkDeadLetters(t *testing.T) {
	t.Helper()
	out, err := f.sqs.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(f.dlq),
		MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
	if err != nil {
		t.Fatalf("read the dead-letter queue: %v", err)
	}
	for _, m := range out.Messages {
		t.Errorf("dead-lettered: %s (reason %q); no valid message may be", aws.ToString(m.Body),
			aws.ToString(m.MessageAttributes[sqssource.ReasonAttribute].StringValue))
	}
	if v, i, d := f.messages(f.dlq); v+i+d > len(out.Messages) {
		t.Errorf("dead-letter queue holds %d messages; no valid message may be dead-lettered", v+i+d)
	}
}

// recorder counts, per key, handler runs and the highest delivery count
// seen, and keeps every outcome and settle by worker.
type recorder struct {
	mu         sync.Mutex
	runs       map[string]int
	deliveries map[string]int
	outcomes   []seen
	settles    []settled
}

type seen struct {
	worker, key string
	kind        consumer.Kind
	err         error
	attempt     int // the delivery's receive count
	at          time.Time
}

type settled struct {
	worker string
	action consumer.Action
	err    error
}

func newRecorder() *recorder {
	return &recorder{runs: map[string]int{}, deliveries: map[string]int{}}
}

func (r *recorder) ran(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[key]++
	return r.runs[key]
}

// runStats is how many handler runs there were in all, and for how many
// keys the handler ran more than once.
func (r *recorder) runStats() (total, again int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.runs {
		total += v
		if v > 1 {
			again++
		}
	}
	return total, again
}

func (r *recorder) runsOf(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[key]
}

// deliveryStats is the most deliveries any message had, and how many keys
// had each count.
func (r *recorder) deliveryStats() (most int, keys map[int]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys = map[int]int{}
	for _, v := range r.deliveries {
		most = max(most, v)
		keys[v]++
	}
	return most, keys
}

// count is how many outcomes of kind were seen, by any worker.
func (r *recorder) count(kind consumer.Kind) int {
	return len(r.find(func(s seen) bool { return s.kind == kind }))
}

func (r *recorder) find(match func(seen) bool) []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []seen
	for _, s := range r.outcomes {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

func (r *recorder) settlesOf(action consumer.Action) []settled {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []settled
	for _, s := range r.settles {
		if s.action == action {
			out = append(out, s)
		}
	}
	return out
}

// kinds summarises the outcomes seen, "processed=3 duplicate=1".
func (r *recorder) kinds() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := map[consumer.Kind]int{}
	for _, s := range r.outcomes {
		n[s.kind]++
	}
	var parts []string
	for _, k := range consumer.Kinds() {
		if n[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, n[k]))
		}
	}
	return strings.Join(parts, " ")
}

// last describes the latest outcome.
func (r *recorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.outcomes) == 0 {
		return "none"
	}
	s := r.outcomes[len(r.outcomes)-1]
	return fmt.Sprintf("%s by %s: %v", s.kind, s.worker, s.err)
}

// timeline lists every outcome in order, for a failure's message.
func (r *recorder) timeline() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, s := range r.outcomes {
		fmt.Fprintf(&b, "  %s %s key=%.30s delivery=%d %s err=%v\n", s.at.Format("15:04:05.000"), s.worker, s.key, s.attempt, s.kind, s.err)
	}
	return b.String()
}

// workerHook records one worker's outcomes and settles.
type workerHook struct {
	r    *recorder
	name string
}

func (h workerHook) OnMessageOutcome(_ context.Context, m *consumer.Message, o consumer.Outcome, _ time.Duration) {
	key := m.Attributes[consumer.IdempotencyKeyAttribute]
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	h.r.deliveries[key] = max(h.r.deliveries[key], m.Deliveries)
	h.r.outcomes = append(h.r.outcomes, seen{worker: h.name, key: key, kind: o.Kind, err: o.Err, attempt: m.Deliveries, at: time.Now()})
}

func (h workerHook) OnMessageSettled(_ context.Context, _ *consumer.Message, a consumer.Action, err error) {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	h.r.settles = append(h.r.settles, settled{worker: h.name, action: a, err: err})
}

// waitFor polls until check reports nothing missing ("") or d passes.
func waitFor(t *testing.T, d time.Duration, check func() (missing string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		missing := check()
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, missing)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition under a deadline
	}
}

// keys makes n distinct idempotency keys for the case.
func keys(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return ks
}

// offsetClock is a worker's clock running d ahead of the real one.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.d) }

var logged atomic.Bool

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("ONCEQ_TEST_LOG") != "" {
		if logged.CompareAndSwap(false, true) {
			t.Log("logging to stderr (ONCEQ_TEST_LOG)")
		}
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}
