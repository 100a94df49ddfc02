package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/integration/history"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/outbox"
)

// ErrNotExactlyOnce is returned when the tables show a lost or doubled
// order, a malformed order outside the dead-letter queue, or a record left
// PENDING.
var ErrNotExactlyOnce = errors.New("not exactly once")

// result is what a run saw and checked.
type result struct {
	source               string
	messages, unique     int
	malformed, dlq       int
	kills, leaves        int
	freezes              int // -source share: members frozen past the record lock
	throttles, errors5xx int
	resets, delayed      int
	duplicatesSuppressed int
	pending              int
	// deadLettersUnrecorded are malformed messages' records left PENDING
	// after their dead letter was sent (not counted in pending).
	deadLettersUnrecorded int
	// pendingRecords are the records left PENDING; pendingStories the
	// history events of their keys.
	pendingRecords, pendingStories []string
	lost, doubled, extra           int
	unitsWant, unitsGot            int64
	wall                           time.Duration
	workerSummaries                []string
	workersExitedNonZero           int
	dlqMissing, dlqUnseen          int
	// history is the check of the workers' store histories.
	history *history.Report
	// offsets is batch mode's check of the offset rows' histories.
	offsets *history.OffsetReport
	// txn is -txn's check of the outputs a read_committed reader saw;
	// txnRestarts counts the processors that stopped on a transaction
	// error and were replaced within their worker process.
	txn         *history.TxnReport
	txnRestarts int
	// dlqCopies counts every record in the dead-letter queue; dlq the
	// malformed messages among them, each once. Dead letters are at least
	// once, so copies can exceed dlq.
	dlqCopies int
	// stopError is the first worker's failed SIGTERM stop: its exit and
	// the last line it logged (its error).
	stopError string
	// pipeline is -pipeline's second stage; nil without it.
	pipeline *pipelineResult
	// redrive is what -redrive's onceq redrive runs did; nil without it.
	redrive *redriveResult
}

func (r *result) line() string {
	if r.txn != nil {
		return fmt.Sprintf("chaos: source=%s inputs=%d outputs_visible=%d outputs_aborted=%d kills=%d leaves=%d processor_restarts=%d lost=%d doubled=%d wall=%s%s",
			r.source, r.messages, r.txn.Visible, r.txn.Aborted, r.kills, r.leaves, r.txnRestarts, r.lost, r.doubled, r.wall.Round(100*time.Millisecond), r.stopSuffix())
	}
	return fmt.Sprintf("chaos: source=%s messages=%d unique=%d kills=%d leaves=%d%s throttles=%d 5xx=%d resets=%d delayed=%d duplicates_suppressed=%d malformed=%d dlq=%d dlq_copies=%d dead_letters_unrecorded=%d pending=%d lost=%d doubled=%d wall=%s%s",
		r.source, r.messages, r.unique, r.kills, r.leaves, r.freezeField(), r.throttles, r.errors5xx, r.resets, r.delayed, r.duplicatesSuppressed,
		r.malformed, r.dlq, r.dlqCopies, r.deadLettersUnrecorded, r.pending, r.lost, r.doubled, r.wall.Round(100*time.Millisecond), r.stopSuffix())
}

// freezeField is " freezes=N" on a share group, where members are frozen.
func (r *result) freezeField() string {
	if r.source != "share" {
		return ""
	}
	return fmt.Sprintf(" freezes=%d", r.freezes)
}

// stopSuffix names the first failed SIGTERM stop, if any, at the end of
// the line.
func (r *result) stopSuffix() string {
	if r.stopError == "" {
		return ""
	}
	return fmt.Sprintf(" sigterm_failed=%d first=%q", r.workersExitedNonZero, r.stopError)
}

// tables of one run, named apart so runs never share state; suffix names
// the run's queues or topics too.
type names struct {
	idem, inventory, orders, suffix string
	shipments                       string // -pipeline's second stage
}

// broker is the message side of a run: SQS or Kafka.
type broker interface {
	// workerArgs are the order-worker flags that point it at the broker.
	workerArgs() []string
	// send produces every delivery, each a new broker message.
	send(ctx context.Context, ds []delivery) error
	// left counts what is not yet settled (for the log, a description).
	left(ctx context.Context) (n int, desc string, err error)
	// deadLetters returns the body of every dead-lettered message.
	deadLetters(ctx context.Context) ([]string, error)
	// close releases what the broker started.
	close()
	// destination is where -pipeline's order workers send order.reserved:
	// the queue URL or topic.
	destination() string
	// senderArgs are onceq relay's flags that send to this broker.
	senderArgs() []string
}

const skus = 100

// run is one chaos run; progress goes to logw.
func run(ctx context.Context, cfg settings, logw io.Writer) (*result, error) {
	if cfg.txn {
		return runTxn(ctx, cfg, logw)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	rng := mrand.New(mrand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15))
	// The redrives and the refuser log from goroutines of their own.
	var logMu sync.Mutex
	logf := func(format string, a ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(logw, "chaos: "+format+"\n", a...)
	}

	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	if err != nil {
		return nil, fmt.Errorf("AWS configuration: %w", err)
	}
	var (
		n  names
		tb tables
		// final reads every key once the workers stopped, for the history.
		final dedup.Store
	)
	if cfg.store == "postgres" {
		pg, err := pgxpool.New(ctx, cfg.postgresURL)
		if err != nil {
			return nil, fmt.Errorf("PostgreSQL: %w", err)
		}
		defer pg.Close()
		n, err = setUpPostgres(ctx, pg)
		if err != nil {
			return nil, err
		}
		tb = pgTables{pg, n}
		if final, err = pgstore.New(pg, pgstore.WithTable(n.idem)); err != nil {
			return nil, err
		}
	} else {
		db := ddb.NewFromConfig(awsCfg, func(o *ddb.Options) { o.BaseEndpoint = aws.String(cfg.dynamoDBURL) })
		if n, err = setUp(ctx, db); err != nil {
			return nil, err
		}
		tb = dynamoTables{db, n}
		if final, err = dynamostore.New(db, dynamostore.WithTable(n.idem)); err != nil {
			return nil, err
		}
	}
	tmp, err := os.MkdirTemp("", "onceq-chaos-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := cfg.workerBin
	if bin == "" {
		bin = filepath.Join(tmp, "order-worker")
		if err := goBuild(ctx, bin, "github.com/onceq/onceq/examples/order-worker"); err != nil {
			return nil, err
		}
	}
	var b broker
	switch cfg.source {
	case "kafka", "franz", "share":
		b, err = startKafka(ctx, cfg, tmp, n.suffix, logw)
	default:
		b, err = newSQS(ctx, awsCfg, cfg, n.suffix)
	}
	if err != nil {
		return nil, err
	}
	defer b.close()
	// -pipeline: the shipping queue or topic, the relays' binary, the outbox.
	var (
		ship     broker
		onceqBin string
		ob       outbox.Store
	)
	if onceqBin = cfg.onceqBin; onceqBin == "" && cfg.pipeline {
		onceqBin = filepath.Join(tmp, "onceq")
		if err := goBuild(ctx, onceqBin, "github.com/onceq/onceq/cmd/onceq"); err != nil {
			return nil, err
		}
	}
	if cfg.pipeline {
		if kb, ok := b.(*kafkaBroker); ok {
			ship = kb.shipping()
		} else if ship, err = newSQS(ctx, awsCfg, cfg, "ship-"+n.suffix); err != nil {
			return nil, err
		}
		if ob, err = outboxOf(final); err != nil {
			return nil, err
		}
	}

	// DynamoDB's faults come from a proxy in front of it; PostgreSQL's
	// run has the kills alone.
	var proxy *faultproxy.Proxy
	storeArgs := []string{"-store", "postgres", "-postgres-url", cfg.postgresURL}
	if cfg.store != "postgres" {
		if proxy, err = faultproxy.New(cfg.dynamoDBURL, faultproxy.WithSeed(cfg.seed)); err != nil {
			return nil, err
		}
		defer proxy.Close()
		addFaults(proxy, cfg)
		storeArgs = []string{"-store", "dynamodb"}
	}

	deliveries, want := plan(cfg, rng)
	source := cfg.source
	if cfg.batch {
		source += "-batch"
	}
	res := &result{source: source, messages: len(deliveries), unique: len(want.orders), malformed: len(want.malformed)}
	var pk parker
	if cfg.redrive {
		var ok bool
		if pk, ok = b.(parker); !ok {
			return nil, fmt.Errorf("-redrive: the %s broker parks no dead letters", cfg.source)
		}
		var parked []delivery
		deliveries, parked = parkPlan(deliveries)
		if err := pk.park(ctx, parked); err != nil {
			return nil, err
		}
		res.redrive = &redriveResult{parked: len(parked), resets: map[string]int{}, done: make(chan struct{})}
		res.source += "-redrive"
	}

	pool := &pool{bin: bin, tmp: tmp, cfg: cfg, names: n, storeArgs: storeArgs, brokerArgs: b.workerArgs(), logw: logw}
	if proxy != nil {
		pool.dynamoURL = proxy.URL()
	}
	if cfg.pipeline {
		res.pipeline = &pipelineResult{}
		pool.onceqBin, pool.ship = onceqBin, ship
	}
	if err := pool.startAll(processes(cfg)); err != nil {
		return nil, err
	}
	left := b.left
	if cfg.pipeline {
		left = pipelineLeft(b, ob, ship)
	}
	if r := res.redrive; r != nil {
		// The refuser marks outbox entries DEAD until the last redrives
		// start; the redrives start once every delivery was sent, and
		// nothing is drained before they have all ended.
		f := &refuser{ob: ob, ship: ship, r: r, logf: logf, stop: make(chan struct{}), done: make(chan struct{}), first: make(chan struct{})}
		go f.run(ctx)
		defer func() { f.stopRefusing() }()
		store := redriveStore(cfg, n.idem)
		plan := redrivePlan{
			letters: func(run string) []string {
				return append(append(slices.Clone(store), pk.redriveFrom(run)...), "-remove-completed")
			},
			entries:      append(slices.Clone(store), "-outbox"),
			stopRefusing: f.stopRefusing,
			firstRefusal: f.first,
		}
		go redrives(ctx, onceqBin, plan, cfg, cfg.redriveDelay, logf, r)
		left = redriveLeft(left, r)
	}
	if err := churn(ctx, cfg, rng, pool, b, deliveries, left, logf, res); err != nil {
		return res, err
	}
	if proxy != nil {
		st := proxy.Stats()
		res.throttles = st.Injected[faultproxy.Throttle] + st.OverCapacity
		res.errors5xx = st.Injected[faultproxy.InternalError]
		res.resets = st.Injected[faultproxy.Reset]
		res.delayed = st.Injected[faultproxy.Latency]
	}

	if err := verify(ctx, tb, b, want, res); err != nil {
		return res, err
	}
	if err := unrecordedDeadLetters(ctx, final, deliveries, want, res); err != nil {
		return res, err
	}
	if res.pipeline != nil {
		if err := verifyPipeline(ctx, tb, ob, tmp, want, res.pipeline); err != nil {
			return res, err
		}
	}
	if r := res.redrive; r != nil {
		dead, err := ob.Entries(ctx, outbox.Dead, 1000)
		if err != nil {
			return res, fmt.Errorf("outbox entries: %w", err)
		}
		r.deadLeft = len(dead)
	}
	if cfg.batch { // batch mode's calls are on the partitions' offset rows
		if res.offsets, err = checkOffsets(ctx, tmp, final, b.(*kafkaBroker)); err != nil {
			return res, err
		}
	} else {
		var effects map[string]int
		if res.pipeline != nil {
			if effects, err = res.pipeline.effects(want); err != nil {
				return res, err
			}
		}
		var resets map[string]int
		if res.redrive != nil {
			resets = res.redrive.resets
		}
		if res.history, res.pendingStories, err = checkHistory(ctx, tmp, final, effects, resets); err != nil {
			return res, err
		}
	}
	res.wall = time.Since(start)
	var problems []string
	if res.lost > 0 || res.doubled > 0 || res.extra > 0 {
		problems = append(problems, fmt.Sprintf("lost %d, doubled %d units, %d orders rows that should not exist", res.lost, res.doubled, res.extra))
	}
	if res.unitsGot != res.unitsWant {
		problems = append(problems, fmt.Sprintf("reserved %d units, want %d", res.unitsGot, res.unitsWant))
	}
	if res.pending > 0 {
		problems = append(problems, fmt.Sprintf("%d records left PENDING:\n%s\n%s", res.pending,
			strings.Join(res.pendingRecords[:min(len(res.pendingRecords), 3)], "\n"), strings.Join(res.pendingStories, "\n")))
	}
	if res.dlqMissing > 0 || res.dlqUnseen > 0 {
		problems = append(problems, fmt.Sprintf("%d malformed orders not in the DLQ, %d valid ones in it", res.dlqMissing, res.dlqUnseen))
	}
	if h := res.history; h != nil && !h.OK() {
		problems = append(problems, fmt.Sprintf("history %s; lost %d, duplicated %d, acked uncommitted %d, fenced commits %d",
			h.Verdict(), h.Lost, h.Duplicated, h.AckedUncommitted, h.FencedCommits))
	}
	if h := res.offsets; h != nil && !h.OK() {
		problems = append(problems, fmt.Sprintf("offsets history %s; lost %d, doubled %d offsets",
			h.Verdict(), h.Lost(), h.Doubled+h.Overlaps))
	}
	if p := res.pipeline; p != nil && (p.lost > 0 || p.doubled > 0 || p.outboxPending > 0) {
		problems = append(problems, fmt.Sprintf("shipping: lost %d, doubled %d shipments, %d outbox entries not dispatched", p.lost, p.doubled, p.outboxPending))
	}
	if r := res.redrive; r != nil && (r.err != nil || r.letters.runs != 3 || r.entries.runs != 3) {
		problems = append(problems, fmt.Sprintf("redrive: %d runs of the dead letters and %d of the outbox ended, want 3 each: %v", r.letters.runs, r.entries.runs, r.err))
	}
	if r := res.redrive; r != nil && (r.letters.failed > 0 || r.entries.failed > 0 || r.deadLeft > 0) {
		problems = append(problems, fmt.Sprintf("redrive: %d dead letters and %d outbox entries failed, %d entries left DEAD", r.letters.failed, r.entries.failed, r.deadLeft))
	}
	if res.workersExitedNonZero > 0 {
		problems = append(problems, fmt.Sprintf("%d workers failed on SIGTERM, the first: %s", res.workersExitedNonZero, res.stopError))
	}
	if len(problems) > 0 {
		return res, fmt.Errorf("%w: %s", ErrNotExactlyOnce, strings.Join(problems, "; "))
	}
	return res, nil
}

func setUp(ctx context.Context, db *ddb.Client) (names, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	s := hex.EncodeToString(b)
	n := names{idem: "chaos_idem_" + s, inventory: "chaos_inv_" + s, orders: "chaos_orders_" + s, suffix: s, shipments: "chaos_ship_" + s}
	if err := dynamostore.CreateTable(ctx, db, n.idem, dynamostore.WithOutbox()); err != nil {
		return n, err
	}
	for _, t := range []struct{ name, key string }{{n.inventory, "sku"}, {n.orders, "order_id"}, {n.shipments, "order_id"}} {
		if _, err := db.CreateTable(ctx, &ddb.CreateTableInput{
			TableName:            aws.String(t.name),
			BillingMode:          ddbtypes.BillingModePayPerRequest,
			AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String(t.key), AttributeType: ddbtypes.ScalarAttributeTypeS}},
			KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String(t.key), KeyType: ddbtypes.KeyTypeHash}},
		}); err != nil {
			return n, fmt.Errorf("create table %s: %w", t.name, err)
		}
	}
	// Ample stock: no order is rejected, so every unique one must reserve.
	for i := range skus {
		if _, err := db.PutItem(ctx, &ddb.PutItemInput{TableName: aws.String(n.inventory), Item: map[string]ddbtypes.AttributeValue{
			"sku":       &ddbtypes.AttributeValueMemberS{Value: "sku-" + strconv.Itoa(i)},
			"available": &ddbtypes.AttributeValueMemberN{Value: "1000000000"},
			"reserved":  &ddbtypes.AttributeValueMemberN{Value: "0"},
		}}); err != nil {
			return n, fmt.Errorf("seed inventory: %w", err)
		}
	}
	return n, nil
}

func goBuild(ctx context.Context, out, pkg string) error {
	b, err := exec.CommandContext(ctx, "go", "build", "-o", out, pkg).CombinedOutput()
	if err != nil {
		return fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// addFaults installs the DynamoDB faults. Half of the resets come after
// the request was forwarded: the write commits and its answer is lost.
func addFaults(p *faultproxy.Proxy, cfg settings) {
	if cfg.throttleRate > 0 {
		p.AddRule(faultproxy.Rule{Rate: cfg.throttleRate, Fault: faultproxy.Throttle})
	}
	if cfg.errorRate > 0 {
		p.AddRule(faultproxy.Rule{Rate: cfg.errorRate, Fault: faultproxy.InternalError})
	}
	if cfg.resetRate > 0 {
		p.AddRule(faultproxy.Rule{Rate: cfg.resetRate / 2, Fault: faultproxy.Reset})
		p.AddRule(faultproxy.Rule{Rate: cfg.resetRate / 2, Fault: faultproxy.Reset, After: true})
	}
	if cfg.latencyRate > 0 && cfg.latency > 0 {
		p.AddRule(faultproxy.Rule{Rate: cfg.latencyRate, Fault: faultproxy.Latency, Delay: cfg.latency})
	}
}

type delivery struct {
	body, key string // key "" sends no idempotency-key attribute
	id        string // the order ID (the Kafka record key)
}

type expected struct {
	orders    map[string]int64 // order ID → qty
	perSKU    map[string]int64
	malformed map[string]bool // bodies
}

// plan makes the deliveries in a random order: unique orders, duplicates
// of them (same key, new message) and malformed bodies, half of those with
// an idempotency key so they are claimed before the handler refuses them.
func plan(cfg settings, rng *mrand.Rand) ([]delivery, expected) {
	dups := cfg.orders * cfg.dupPercent / 100
	unique := cfg.orders - dups
	want := expected{orders: map[string]int64{}, perSKU: map[string]int64{}, malformed: map[string]bool{}}
	var ds []delivery
	for i := range unique {
		id := "o-" + strconv.Itoa(i)
		qty := int64(1 + rng.IntN(3))
		sku := "sku-" + strconv.Itoa(rng.IntN(skus))
		want.orders[id] = qty
		want.perSKU[sku] += qty
		ds = append(ds, delivery{body: fmt.Sprintf(`{"order_id":%q,"sku":%q,"qty":%d}`, id, sku, qty), key: id, id: id})
	}
	for range dups {
		d := ds[rng.IntN(unique)]
		if rng.IntN(2) == 0 {
			d.key = "" // the order ID is the key either way
		}
		ds = append(ds, d)
	}
	bad := []string{`not json %d`, `{"order_id":"bad-%d","sku":"sku-1","qty":-3}`, `{"order_id":"bad-%d","qty":1}`, `{"order_id":"bad-%d","sku":"sku-1","qty":1} trailing`}
	for i := range cfg.malformed {
		b := fmt.Sprintf(bad[i%len(bad)], i)
		want.malformed[b] = true
		d := delivery{body: b, id: "bad-" + strconv.Itoa(i)}
		if i%2 == 0 {
			d.key = "bad-key-" + strconv.Itoa(i)
		}
		ds = append(ds, d)
	}
	rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	return ds, want
}

// sendPaced sends ds in twenty parts spread over at least span, so that
// the workers are still busy when the first kill comes (at most 1.5 kill
// intervals in): a fast run would otherwise drain before it, and a run
// with no chaos proves nothing.
func sendPaced(ctx context.Context, b broker, ds []delivery, span time.Duration) error {
	const parts = 20
	start, per := time.Now(), (len(ds)+parts-1)/parts
	for i := 1; len(ds) > 0; i++ {
		n := min(per, len(ds))
		if err := b.send(ctx, ds[:n]); err != nil {
			return err
		}
		ds = ds[n:]
		if wait := time.Until(start.Add(time.Duration(i) * span / parts)); wait > 0 && len(ds) > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
	}
	return nil
}

// churn sends ds through b (paced) to p's processes, started already,
// kills and restarts them until left says everything is settled, and
// stops them all: on return none is running.
func churn(ctx context.Context, cfg settings, rng *mrand.Rand, p *pool, b broker, ds []delivery, left func(context.Context) (int, string, error), logf func(string, ...any), res *result) error {
	defer p.stopAll(5 * time.Second) // on an early return; a no-op after the orderly stop
	sendErr := make(chan error, 1)
	go func() { sendErr <- sendPaced(ctx, b, ds, 3*cfg.killEvery) }()
	err := chaosUntilDrained(ctx, cfg, rng, p, left, sendErr, logf, res)
	res.stopError = p.firstStopError()
	if err != nil {
		return err
	}
	var failed int
	res.workerSummaries, failed = p.stopAll(30 * time.Second)
	res.workersExitedNonZero += failed
	res.stopError = p.firstStopError()
	return nil
}

// chaosUntilDrained kills and restarts workers until everything was sent
// and the broker has held nothing unsettled for three polls in a row (a
// batched delete or commit still pending keeps its message counted). On
// Kafka every third event is a graceful leave (SIGTERM) instead of a kill:
// the group sees members both vanish and leave.
//
// Once everything was sent, an event waits for progress: the next kill
// comes only after something settled since the last one. On a loaded
// machine a group's recovery (a session timing out, a rebalance, a
// transactional ID fencing its predecessor) can take longer than the
// kill interval, and chaos that outruns recovery would stall the run
// without testing anything more.
func chaosUntilDrained(ctx context.Context, cfg settings, rng *mrand.Rand, p *pool, left func(context.Context) (int, string, error), sendErr <-chan error, logf func(string, ...any), res *result) error {
	sent, empty, events := false, 0, 0
	// left's count when the last event came after everything was sent;
	// -1 while none has.
	leftAtEvent := -1
	nextKill := time.Now().Add(jitter(cfg.killEvery, rng))
	poll := time.NewTicker(500 * time.Millisecond)
	defer poll.Stop()
	lastLog := time.Now()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("not drained in time: %w", ctx.Err())
		case err := <-sendErr:
			if err != nil {
				return err
			}
			sent = true
			logf("all deliveries sent")
		case <-poll.C:
		}
		if err := p.check(); err != nil {
			return err
		}
		n, desc := -1, ""
		if sent {
			var err error
			if n, desc, err = left(ctx); err != nil {
				return err
			}
		}
		stalled := n >= 0 && leftAtEvent >= 0 && n >= leftAtEvent
		if cfg.killEvery > 0 && time.Now().After(nextKill) && !stalled {
			leftAtEvent = n
			i := rng.IntN(processes(cfg))
			events++
			if cfg.source == "share" && events%3 == 0 {
				// A frozen member keeps its connection, so its records come
				// back only when their locks run out; thawed, it finishes
				// handlers whose records another member may hold by then.
				if err := p.freeze(i, shareLock+time.Second); err != nil {
					return err
				}
				res.freezes++
				nextKill = time.Now().Add(jitter(cfg.killEvery, rng))
				continue
			}
			if cfg.source != "sqs" && events%3 == 0 {
				if err := p.leave(i, 15*time.Second); err != nil {
					res.workersExitedNonZero++
					logf("%v", err)
				}
				res.leaves++
			} else {
				if err := p.kill(i); err != nil {
					return err
				}
				switch roleOf(cfg, i) {
				case roleRelay:
					res.pipeline.relayKills++
				case roleShip:
					res.pipeline.shipKills++
				}
				res.kills++
			}
			if err := p.start(i); err != nil {
				return err
			}
			nextKill = time.Now().Add(jitter(cfg.killEvery, rng))
		}
		if !sent {
			continue
		}
		if time.Since(lastLog) > 5*time.Second {
			logf("%s, %d kills, %d leaves", desc, res.kills, res.leaves)
			lastLog = time.Now()
		}
		if n > 0 {
			empty = 0
			continue
		}
		if empty++; empty >= 3 {
			return nil
		}
	}
}

func jitter(d time.Duration, rng *mrand.Rand) time.Duration {
	if d <= 0 {
		return time.Hour
	}
	return d/2 + time.Duration(rng.Int64N(int64(d)))
}

// pool owns the worker processes: each is started, killed or stopped here
// and waited for by its own goroutine, which ends when the process does.
type pool struct {
	bin, tmp   string
	cfg        settings
	names      names
	storeArgs  []string // -store and its connection flags
	brokerArgs []string
	dynamoURL  string
	logw       io.Writer
	// -pipeline: the relays' onceq binary and the shipping queue or topic.
	onceqBin string
	ship     broker

	mu    sync.Mutex
	procs map[int]*proc
	gen   int
	// stopErrs are the failed SIGTERM stops, in order: each worker's exit
	// and the last line it logged.
	stopErrs []string
}

// stopFailed records worker i's failed SIGTERM stop.
func (p *pool) stopFailed(i int, pr *proc) string {
	tail, _ := os.ReadFile(pr.log)
	msg := fmt.Sprintf("worker %d: %v: %s", i, pr.err, lastLines(tail, 1))
	p.mu.Lock()
	p.stopErrs = append(p.stopErrs, msg)
	p.mu.Unlock()
	return msg
}

// firstStopError is the first failed SIGTERM stop, or "".
func (p *pool) firstStopError() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.stopErrs) == 0 {
		return ""
	}
	return p.stopErrs[0]
}

type proc struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	done   chan struct{}
	err    error
	log    string
}

func (p *pool) start(i int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.procs == nil {
		p.procs = map[int]*proc{}
	}
	p.gen++
	logPath := filepath.Join(p.tmp, fmt.Sprintf("worker-%d-%d.log", i, p.gen))
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	c := p.cfg
	common := []string{
		"-idempotency-table", p.names.idem, "-inventory-table", p.names.inventory, "-orders-table", p.names.orders,
		"-concurrency", strconv.Itoa(c.concurrency), "-lease-ttl", c.leaseTTL.String(), "-handler-timeout", c.handlerTO.String(),
		"-progress", "1h", "-metrics-addr", "", // several workers share the machine: no fixed port
		// A loaded machine's DynamoDB Local can take longer than the
		// default to describe a table; a worker that stopped on that
		// would end the run without testing anything.
		"-check-timeout", "1m"}
	var cmd *exec.Cmd
	switch roleOf(c, i) {
	case roleTxn:
		cmd = exec.Command(p.bin, append(slices.Clone(p.brokerArgs), "-transactional-id", txnID(p.names.suffix, i))...)
	case roleRelay:
		cmd = exec.Command(p.onceqBin, p.relayArgs()...)
	case roleShip:
		args := append(slices.Clone(p.storeArgs), p.ship.workerArgs()...)
		cmd = exec.Command(p.bin, append(append(args, "-ship", "-shipments-table", p.names.shipments,
			"-history", filepath.Join(p.tmp, fmt.Sprintf("ship-%d-%d.history", i, p.gen))), common...)...)
	default:
		args := append(slices.Clone(p.storeArgs), p.brokerArgs...)
		if c.batch {
			args = append(args, "-batch", "-history", offsetsPath(p.tmp, i, p.gen))
		} else {
			args = append(args, "-history", historyPath(p.tmp, i, p.gen))
		}
		if p.ship != nil {
			args = append(args, "-send-reserved-to", p.ship.destination())
		}
		cmd = exec.Command(p.bin, append(args, common...)...)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ORDER_WORKER_") && !strings.HasPrefix(kv, "AWS_ENDPOINT_URL") {
			env = append(env, kv)
		}
	}
	if p.dynamoURL != "" {
		env = append(env, "AWS_ENDPOINT_URL_DYNAMODB="+p.dynamoURL)
	}
	env = append(env, "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test")
	if c.sqsURL != "" {
		env = append(env, "AWS_ENDPOINT_URL_SQS="+c.sqsURL)
	}
	cmd.Env = env
	pr := &proc{cmd: cmd, done: make(chan struct{}), log: logPath}
	cmd.Stdout = &pr.stdout
	if c.verboseWorker {
		cmd.Stderr = io.MultiWriter(logf, p.logw)
	} else {
		cmd.Stderr = logf
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start worker: %w", err)
	}
	go func() {
		pr.err = cmd.Wait()
		logf.Close()
		close(pr.done)
	}()
	p.procs[i] = pr
	return nil
}

// startAll starts processes 0..n-1; on an error it stops those started.
func (p *pool) startAll(n int) error {
	for i := range n {
		if err := p.start(i); err != nil {
			p.stopAll(5 * time.Second)
			return err
		}
	}
	return nil
}

// check reports a worker that died on its own.
func (p *pool) check() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, pr := range p.procs {
		select {
		case <-pr.done:
			tail, _ := os.ReadFile(pr.log)
			return fmt.Errorf("worker %d exited by itself (%v): %s", i, pr.err, lastLines(tail, 5))
		default:
		}
	}
	return nil
}

// take removes worker i from the pool and returns it (nil if it is not
// running), so that only one caller stops it.
func (p *pool) take(i int) *proc {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.procs[i]
	delete(p.procs, i)
	return pr
}

func (p *pool) kill(i int) error {
	pr := p.take(i)
	if pr == nil {
		return nil
	}
	if err := pr.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-pr.done
	return nil
}

// freeze stops worker i with SIGSTOP for d, then lets it go on.
func (p *pool) freeze(i int, d time.Duration) error {
	p.mu.Lock()
	pr := p.procs[i]
	p.mu.Unlock()
	if pr == nil {
		return nil
	}
	if err := pr.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return nil // it exited meanwhile: p.check reports it
	}
	time.Sleep(d)
	_ = pr.cmd.Process.Signal(syscall.SIGCONT)
	return nil
}

// leave stops worker i with SIGTERM (a graceful leave of the group),
// killing it after grace; it reports a non-zero exit.
func (p *pool) leave(i int, grace time.Duration) error {
	pr := p.take(i)
	if pr == nil {
		return nil
	}
	_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-pr.done:
	case <-time.After(grace):
		_ = pr.cmd.Process.Kill()
		<-pr.done
	}
	if !stoppedCleanly(pr.err) {
		p.stopFailed(i, pr)
		tail, _ := os.ReadFile(pr.log)
		return fmt.Errorf("worker %d leave: %v: %s", i, pr.err, lastLines(tail, 5))
	}
	return nil
}

// stopAll sends SIGTERM to every worker, waits up to grace (then kills),
// and returns their summary lines and how many exited non-zero.
func (p *pool) stopAll(grace time.Duration) (summaries []string, failed int) {
	p.mu.Lock()
	procs := p.procs
	p.procs = nil
	p.mu.Unlock()
	for _, pr := range procs {
		_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	for i, pr := range procs {
		select {
		case <-pr.done:
		case <-deadline.C:
			_ = pr.cmd.Process.Kill()
			<-pr.done
		}
		if !stoppedCleanly(pr.err) {
			failed++
			p.stopFailed(i, pr)
			tail, _ := os.ReadFile(pr.log)
			fmt.Fprintf(p.logw, "chaos: worker stop: %v: %s\n", pr.err, lastLines(tail, 5))
		}
		summaries = append(summaries, strings.TrimSpace(pr.stdout.String()))
	}
	return summaries, failed
}

// stoppedCleanly: the worker exited 0 on SIGTERM, or died of the signal
// itself, which it can only do before main installed its handler, so
// before it received any message (a worker restarted just before the end).
func stoppedCleanly(err error) bool {
	var ee *exec.ExitError
	if err == nil {
		return true
	}
	if errors.As(err, &ee) {
		ws, ok := ee.Sys().(syscall.WaitStatus)
		return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM
	}
	return false
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// tables reads what the workers wrote: order rows by order ID, reserved
// units by sku, and how many records were left PENDING.
type tables interface {
	orderRows(ctx context.Context) (map[string]int, error)
	reserved(ctx context.Context) (map[string]int64, error)
	// pending describes each record left PENDING (its stored fields).
	pending(ctx context.Context) ([]string, error)
	// shipments are -pipeline's shipments by order ID.
	shipments(ctx context.Context) (map[string]int64, error)
}

// dynamoTables are the DynamoDB store's and the example's tables.
type dynamoTables struct {
	db *ddb.Client
	n  names
}

func (d dynamoTables) orderRows(ctx context.Context) (map[string]int, error) {
	rows := map[string]int{}
	return rows, scan(ctx, d.db, d.n.orders, func(it map[string]ddbtypes.AttributeValue) {
		if s, ok := it["order_id"].(*ddbtypes.AttributeValueMemberS); ok {
			rows[s.Value]++
		}
	})
}

func (d dynamoTables) reserved(ctx context.Context) (map[string]int64, error) {
	got := map[string]int64{}
	return got, scan(ctx, d.db, d.n.inventory, func(it map[string]ddbtypes.AttributeValue) {
		sku, _ := it["sku"].(*ddbtypes.AttributeValueMemberS)
		r, _ := it["reserved"].(*ddbtypes.AttributeValueMemberN)
		if sku != nil && r != nil {
			got[sku.Value], _ = strconv.ParseInt(r.Value, 10, 64)
		}
	})
}

func (d dynamoTables) pending(ctx context.Context) ([]string, error) {
	var left []string
	err := scan(ctx, d.db, d.n.idem, func(it map[string]ddbtypes.AttributeValue) {
		if s, ok := it["status"].(*ddbtypes.AttributeValueMemberS); !ok || s.Value != "PENDING" {
			return
		}
		fields := make([]string, 0, len(it))
		for name, v := range it {
			switch v := v.(type) {
			case *ddbtypes.AttributeValueMemberS:
				fields = append(fields, name+"="+v.Value)
			case *ddbtypes.AttributeValueMemberN:
				fields = append(fields, name+"="+v.Value)
			default:
				fields = append(fields, fmt.Sprintf("%s=%T", name, v))
			}
		}
		slices.Sort(fields)
		left = append(left, strings.Join(fields, " "))
	})
	return left, err
}

// unrecordedDeadLetters takes out of res.pending the records of malformed
// messages left PENDING by a worker killed after their dead letter was sent
// (with it, on SQS, the original deleted) and before the failure was
// recorded: the copy in the DLQ is the message's fate, and the record, its
// lease run out, is claimable like a FAILED one. A valid order's PENDING
// record stays a failure.
func unrecordedDeadLetters(ctx context.Context, final dedup.Store, ds []delivery, want expected, res *result) error {
	if res.pending == 0 || res.dlqMissing > 0 {
		return nil
	}
	for _, d := range ds {
		if d.key == "" || !want.malformed[d.body] {
			continue
		}
		k, err := dedup.Key(workerNamespace, d.key)
		if err != nil {
			return err
		}
		r, err := final.Get(ctx, k)
		if errors.Is(err, dedup.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading the record of dead-lettered key_hash %s: %w", dedup.KeyHash(d.key), err)
		}
		if r.Status == dedup.StatusPending {
			res.deadLettersUnrecorded++
		}
	}
	res.pending -= res.deadLettersUnrecorded
	return nil
}

// verify reads the tables and the DLQ directly (not through the proxy).
func verify(ctx context.Context, tb tables, b broker, want expected, res *result) error {
	rows, err := tb.orderRows(ctx)
	if err != nil {
		return err
	}
	for id := range want.orders {
		if rows[id] == 0 {
			res.lost++
		}
	}
	for id := range rows {
		if _, ok := want.orders[id]; !ok {
			res.extra++
		}
	}
	for _, q := range want.perSKU {
		res.unitsWant += q
	}
	reserved, err := tb.reserved(ctx)
	if err != nil {
		return err
	}
	for sku, got := range reserved {
		res.unitsGot += got
		if d := got - want.perSKU[sku]; d > 0 {
			res.doubled += int(d)
		}
	}
	if res.pendingRecords, err = tb.pending(ctx); err != nil {
		return err
	}
	res.pending = len(res.pendingRecords)
	if res.doubled == 0 && res.extra == 0 {
		res.duplicatesSuppressed = res.messages - res.malformed - len(rows)
	}
	bodies, err := b.deadLetters(ctx)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, body := range bodies {
		if want.malformed[body] {
			seen[body] = true
		} else {
			res.dlqUnseen++
		}
		res.dlqCopies++
	}
	res.dlq = len(seen)
	res.dlqMissing = len(want.malformed) - len(seen)
	return nil
}

func scan(ctx context.Context, db *ddb.Client, table string, f func(map[string]ddbtypes.AttributeValue)) error {
	p := ddb.NewScanPaginator(db, &ddb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("scan %s: %w", table, err)
		}
		for _, it := range page.Items {
			f(it)
		}
	}
	return nil
}
