// Command order-worker reserves inventory for orders, exactly once.
//
// Each order message ({"order_id":"o-1","sku":"sku-1","qty":2}) reserves
// stock in the same atomic commit that marks its idempotency record
// COMPLETED; duplicates get the cached answer, orders beyond the stock are
// rejected (and stay rejected), malformed ones are dead-lettered.
//
// With -demo N it runs embedded: an in-memory queue and store, and a
// second stage: each reserved order sends an order.reserved event through
// the outbox (committed with the order's COMPLETED record) to a shipping
// queue, which a second onceq worker consumes, shipping each order once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/smithy-go/middleware"
	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/sources/memsource"
)

type options struct {
	source           string
	store            string
	postgresURL      string
	redisAddr        string
	sqsQueueURL      string
	sqsDLQURL        string
	kafkaBrokers     string
	kafkaTopic       string
	kafkaGroup       string
	kafkaDLQTopic    string
	kafkaProtocol    string
	kafkaSession     time.Duration
	kafkaRebalance   time.Duration
	kafkaHeartbeat   time.Duration
	idempotencyTable string
	inventoryTable   string
	ordersTable      string
	createTables     bool
	concurrency      int
	demo             int
	progress         time.Duration
	metricsAddr      string
	// metricsAddrSet: -metrics-addr came from the command line or the
	// environment, so failing to bind it is an error, not a warning.
	metricsAddrSet bool
	leaseTTL       time.Duration
	handlerTimeout time.Duration
	checkTimeout   time.Duration
	// stopAfter ends the run once this many messages settled (tests).
	stopAfter int
	// meters is where the store and source report (set by work).
	meters metric.MeterProvider
	// awsAPIOptions are added to every AWS client's middleware (tests
	// record the calls made).
	awsAPIOptions []func(*middleware.Stack) error
	// beforeExit, when set, is called with the bound metrics address after
	// the run and before telemetry stops (tests scrape then).
	beforeExit func(metricsAddr string)
	// batch runs Kafka batch mode, batchSize orders a batch at most.
	batch     bool
	batchSize int
	// history is the file each store call and settled message is appended
	// to, one JSON line each (storehistory); empty: none.
	history string
	// sendReservedTo is where each reserved order's order.reserved event
	// goes through the outbox (an SQS queue URL or a Kafka topic); empty:
	// none (the demo sends to its in-process shipping queue).
	sendReservedTo string
	// ship runs the shipping worker instead: it consumes order.reserved
	// events and records each shipment in shipmentsTable.
	ship           bool
	shipmentsTable string
}

// envName maps a flag to its environment variable: -demo → ORDER_WORKER_DEMO.
func envName(flagName string) string {
	return "ORDER_WORKER_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("order-worker", flag.ContinueOnError)
	// A usage error is one line, printed by run; only -h lists the flags.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.source, "source", "memory", "message source: memory, sqs, kafka (kafka-go), franz (franz-go, cooperative rebalancing) or share (a Kafka share group on franz-go, read from the earliest record; -kafka-group names the share group)")
	fs.StringVar(&o.store, "store", "memory", "idempotency store and inventory: memory, dynamodb, postgres, or redis (the memory inventory, reserved by the handler: not atomic with the record)")
	fs.StringVar(&o.redisAddr, "redis-addr", "127.0.0.1:6379", "Redis address for -store redis (keys prefixed with -idempotency-table and ':')")
	fs.StringVar(&o.postgresURL, "postgres-url", "", "PostgreSQL connection URL for -store postgres (default: PostgreSQL's PG* environment variables)")
	fs.StringVar(&o.sqsQueueURL, "sqs-queue-url", "", "SQS queue URL (-source sqs)")
	fs.StringVar(&o.sqsDLQURL, "sqs-dlq-url", "", "SQS dead-letter queue URL (default: the queue's redrive policy)")
	fs.StringVar(&o.kafkaBrokers, "kafka-brokers", "127.0.0.1:9092", "comma-separated Kafka bootstrap brokers (-source kafka or franz)")
	fs.StringVar(&o.kafkaTopic, "kafka-topic", "orders", "Kafka topic of the orders")
	fs.StringVar(&o.kafkaGroup, "kafka-group", "order-worker", "Kafka consumer group")
	fs.StringVar(&o.kafkaProtocol, "kafka-group-protocol", "cooperative", "-source franz: how the group shares partitions: cooperative (the classic protocol, cooperative-sticky), consumer (KIP-848's broker-driven protocol, Kafka 4.0+) or eager")
	fs.StringVar(&o.kafkaDLQTopic, "kafka-dlq-topic", "", "Kafka dead-letter topic (default: the orders topic + \"-dlq\")")
	// Short group timings let the group notice a killed member quickly (chaos runs).
	fs.DurationVar(&o.kafkaSession, "kafka-session-timeout", 0, "Kafka group session timeout; 0: kafka-go's 30s")
	fs.DurationVar(&o.kafkaHeartbeat, "kafka-heartbeat", 0, "Kafka group heartbeat interval, which is also how soon a rebalance is noticed; 0: a third of the session timeout")
	fs.DurationVar(&o.kafkaRebalance, "kafka-rebalance-timeout", 0, "Kafka group rebalance timeout; 0: kafka-go's 30s (in-flight work drains for half of it at most)")
	fs.StringVar(&o.idempotencyTable, "idempotency-table", "onceq_idempotency", "DynamoDB idempotency table")
	fs.StringVar(&o.inventoryTable, "inventory-table", "onceq_inventory", "DynamoDB inventory table")
	fs.StringVar(&o.ordersTable, "orders-table", "onceq_orders", "DynamoDB orders table")
	fs.BoolVar(&o.createTables, "create-tables", false, "create missing tables (TTL on) and seed skus sku-0 … sku-99 with 1000000 available")
	fs.IntVar(&o.concurrency, "concurrency", 16, "handlers running at once")
	fs.IntVar(&o.demo, "demo", 0, "memory source (required with it): run N generated orders (about 20% duplicates, a few malformed and out of stock), print the summary, exit")
	fs.DurationVar(&o.progress, "progress", 2*time.Second, "interval of the progress line on stderr; 0: no progress lines")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "127.0.0.1:9464", "serve Prometheus /metrics and /healthz here (loopback by default; :9464 for every interface); empty: off")
	// Short leases let a crashed worker's claims be taken over quickly (chaos runs).
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 60*time.Second, "idempotency lease; must exceed -handler-timeout by max(2s, 10%)")
	fs.DurationVar(&o.handlerTimeout, "handler-timeout", 30*time.Second, "handler timeout")
	fs.DurationVar(&o.checkTimeout, "check-timeout", 10*time.Second, "how long each start-up check (the store's table, the queue or topic) may take before the worker stops as misconfigured")
	fs.BoolVar(&o.batch, "batch", false, "Kafka batch mode (-source kafka or franz; -store memory, postgres or dynamodb): each partition's orders are reserved a batch at a time, committed with the partition's offset in one transaction; duplicates are dropped by their keys, claimed in the same transaction")
	fs.IntVar(&o.batchSize, "batch-size", 100, "the most orders of one partition in a batch (-batch); on DynamoDB a batch whose writes exceed a transaction (100 items) is split")
	fs.StringVar(&o.history, "history", "", "append every idempotency-store call (with its call and return times and outcome) and every settled message to this file, one JSON line each, for a linearizability check (the chaos driver's); with -batch, every call on the partitions' offset rows instead; empty: none")
	fs.StringVar(&o.sendReservedTo, "send-reserved-to", "", "send an order.reserved event for each reserved order to this SQS queue URL or Kafka topic, through the store's outbox (committed with the order's COMPLETED record; a relay such as `onceq relay` sends it); -store dynamodb or postgres")
	fs.BoolVar(&o.ship, "ship", false, "run the shipping worker instead: consume order.reserved events (from the -source flags) and ship each order once, a shipment committed with its event's COMPLETED record in -shipments-table; -store dynamodb or postgres")
	fs.StringVar(&o.shipmentsTable, "shipments-table", "onceq_shipments", "-ship: the shipments table (order_id, shipped: how many shipments committed)")
	// Every flag may come from the environment; a flag on the command line wins.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(envName(f.Name)); ok && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", envName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return o, envErr
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(stderr, "usage: order-worker [flags]")
			fs.PrintDefaults()
		}
		return o, err
	}
	_, o.metricsAddrSet = os.LookupEnv(envName("metrics-addr"))
	fs.Visit(func(f *flag.Flag) { o.metricsAddrSet = o.metricsAddrSet || f.Name == "metrics-addr" })
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q: order-worker takes flags only", fs.Arg(0))
	case o.source != "memory" && o.source != "sqs" && o.source != "kafka" && o.source != "franz" && o.source != "share":
		return o, fmt.Errorf("-source %q: want memory, sqs, kafka, franz or share", o.source)
	case o.store != "memory" && o.store != "dynamodb" && o.store != "postgres" && o.store != "redis":
		return o, fmt.Errorf("-store %q: want memory, dynamodb, postgres or redis", o.store)
	case o.source == "sqs" && o.sqsQueueURL == "":
		return o, errors.New("-source sqs needs -sqs-queue-url")
	case (o.source == "kafka" || o.source == "franz" || o.source == "share") && (len(o.brokers()) == 0 || o.kafkaTopic == "" || o.kafkaGroup == ""):
		return o, fmt.Errorf("-source %s needs -kafka-brokers, -kafka-topic and -kafka-group", o.source)
	case o.kafkaSession < 0 || o.kafkaRebalance < 0 || o.kafkaHeartbeat < 0:
		return o, errors.New("-kafka-session-timeout, -kafka-rebalance-timeout and -kafka-heartbeat must not be negative")
	case o.demo < 0:
		return o, fmt.Errorf("-demo %d: want a number of orders", o.demo)
	case o.source != "memory" && o.demo > 0:
		return o, errors.New("-demo runs on the memory source only")
	case o.source == "memory" && o.demo == 0:
		// Nothing can send to the in-process queue: the worker would idle.
		return o, errors.New("the memory source has no producer: pass -demo N, or -source sqs or kafka")
	case o.kafkaProtocol != "cooperative" && o.kafkaProtocol != "consumer" && o.kafkaProtocol != "eager":
		return o, fmt.Errorf("-kafka-group-protocol %q: want cooperative, consumer or eager", o.kafkaProtocol)
	case o.kafkaProtocol != "cooperative" && o.source != "franz":
		return o, fmt.Errorf("-kafka-group-protocol %s needs -source franz (kafka-go has only the classic, eager protocol)", o.kafkaProtocol)
	case o.batch && o.source != "kafka" && o.source != "franz":
		return o, fmt.Errorf("-batch runs on -source kafka or franz, not %s", o.source)
	case o.batch && o.store != "memory" && o.store != "postgres" && o.store != "dynamodb":
		return o, fmt.Errorf("-batch needs -store memory, postgres or dynamodb, not %s", o.store)
	case o.batch && o.batchSize < 1:
		return o, fmt.Errorf("-batch-size %d: want at least 1", o.batchSize)
	case (o.sendReservedTo != "" || o.ship) && o.store != "dynamodb" && o.store != "postgres":
		return o, fmt.Errorf("-send-reserved-to and -ship need -store dynamodb or postgres, not %s", o.store)
	case (o.sendReservedTo != "" || o.ship) && (o.batch || o.demo > 0):
		return o, errors.New("-send-reserved-to and -ship do not go with -batch or -demo")
	case o.ship && o.sendReservedTo != "":
		return o, errors.New("-ship consumes order.reserved events; it sends none (-send-reserved-to)")
	case o.progress < 0:
		return o, fmt.Errorf("-progress %v: want a positive interval, or 0 for no progress lines", o.progress)
	}
	// The consumer's own rules (concurrency, lease against handler
	// timeout) decide; New checks them over an idle in-process queue.
	store, err := memstore.New()
	if err != nil {
		return o, err
	}
	queue, err := memsource.NewQueue("flags")
	if err != nil {
		return o, err
	}
	if _, err := consumer.New(queue.Source(), store, reserveHandler(nil), o.consumerOptions()...); err != nil {
		return o, err
	}
	if o.kafkaDLQTopic == "" {
		o.kafkaDLQTopic = o.kafkaTopic + "-dlq"
	}
	return o, nil
}

// brokers is -kafka-brokers as a list, blanks dropped.
func (o options) brokers() []string {
	var out []string
	for b := range strings.SplitSeq(o.kafkaBrokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// consumerOptions are the consumer settings the flags choose.
func (o options) consumerOptions() []consumer.Option {
	return []consumer.Option{
		consumer.Concurrency(o.concurrency),
		consumer.LeaseTTL(o.leaseTTL),
		consumer.HandlerTimeout(o.handlerTimeout),
		consumer.CheckTimeout(o.checkTimeout),
		consumer.WithKeyFunc(orderKey),
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "order-worker: %v (order-worker -h lists the flags)\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := work(ctx, opts, stdout, stderr); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Told to stop (SIGTERM, Ctrl-C) while starting: nothing failed.
			fmt.Fprintln(stderr, "order-worker: stopped while starting")
			return 0
		}
		fmt.Fprintln(stderr, "order-worker:", err)
		return 1
	}
	return 0
}

func work(ctx context.Context, opts options, stdout, stderr io.Writer) error {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tel, err := startTelemetry(ctx, opts.metricsAddr, !opts.metricsAddrSet, stderr, logger)
	if err != nil {
		return err
	}
	defer func() {
		if opts.beforeExit != nil {
			opts.beforeExit(tel.addr)
		}
		if err := tel.shutdown(context.WithoutCancel(ctx)); err != nil {
			logger.Warn("telemetry shutdown", "err", err)
		}
	}()
	opts.meters = tel.meterProvider()
	wiring, err := wire(ctx, opts, logger)
	if err != nil {
		return explainStart(err, opts, false)
	}
	if wiring.close != nil {
		defer wiring.close()
	}
	if opts.batch {
		return workBatch(ctx, opts, wiring, logger, tel.meterProvider(), stderr)
	}
	inv := wiring.inventory
	expected := opts.stopAfter
	if opts.demo > 0 {
		expected = generateDemo(ctx, wiring.queue, opts.demo)
	}
	sum := &summary{start: time.Now()}
	store := wiring.store
	hooks := []consumer.Hook{sum}
	if opts.history != "" {
		rec, closeHistory, err := openHistory(opts.history, store)
		if err != nil {
			_ = wiring.source.Close(context.WithoutCancel(ctx))
			return err
		}
		defer closeHistory()
		store, hooks = rec, append(hooks, rec)
	}
	handler := reserveHandler(inv)
	if opts.ship {
		handler = shipHandler(shipWriter(opts))
	}
	copts := append(opts.consumerOptions(),
		consumer.WithLogger(logger),
		consumer.WithHooks(hooks...),
		consumer.WithMeterProvider(tel.meterProvider()),
		consumer.WithTracerProvider(tel.tracerProvider()))
	// The demo's second stage: each reserved order sends order.reserved
	// through the outbox to the shipping worker.
	var ship *shipping
	if ob, ok := outboxOf(wiring.store); ok && opts.demo > 0 {
		if ship, err = startShipping(ctx, ob, logger, tel.meterProvider()); err != nil {
			_ = wiring.source.Close(context.WithoutCancel(ctx))
			return err
		}
		defer func() { _ = ship.stop() }()
		handler = shipOnward(handler, ship.queue.Name())
		copts = append(copts, consumer.SendsOnward())
	}
	if opts.sendReservedTo != "" {
		handler = shipOnward(handler, opts.sendReservedTo)
		copts = append(copts, consumer.SendsOnward())
	}
	c, err := consumer.New(wiring.source, store, handler, copts...)
	if err != nil {
		_ = wiring.source.Close(context.WithoutCancel(ctx)) // Run would have; it never will
		return explainStart(err, opts, !wiring.source.Capabilities().DeadLetter)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()

	var tick <-chan time.Time // nil: -progress 0, no progress lines
	if opts.progress > 0 {
		t := time.NewTicker(opts.progress)
		defer t.Stop()
		tick = t.C
	}
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	var runErr error
	stopped := false // Run returned by itself: a fault, or the source closed
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case runErr = <-done:
			stopped = true
			break loop
		case <-tick:
			sum.progress(stderr)
		case <-poll.C:
			if expected > 0 && sum.settled() >= int64(expected) {
				break loop
			}
		}
	}
	tel.draining.Store(true)
	cancel()
	if !stopped {
		runErr = <-done
	}
	if runErr != nil {
		return explainStart(runErr, opts, false)
	}
	if opts.progress > 0 {
		sum.progress(stderr)
	}
	if reserved, orders, err := wiring.totals(context.WithoutCancel(ctx)); err == nil {
		fmt.Fprintf(stderr, "order-worker: inventory reserved %d units over %d orders\n", reserved, orders)
	}
	if ship != nil {
		ship.await(ctx, sum.processed.Load(), 30*time.Second)
		if err := ship.stop(); err != nil {
			return err
		}
		shipped, _ := ship.counts()
		sum.shipped.Store(int64(shipped))
		sum.shippingDuplicates.Store(ship.duplicates.Load())
		ship.report(stderr, sum.processed.Load())
	}
	return sum.writeJSON(stdout)
}

// generateDemo enqueues n deliveries: unique orders, every fifth delivery
// a duplicate of an earlier one (same body, new message), ten that exceed
// any sku's stock and, past 100 orders, four malformed bodies. It returns
// how many messages were sent.
func generateDemo(ctx context.Context, q *memsource.Queue, n int) int {
	send := func(body string) { _ = q.Send(ctx, memsource.Outgoing{Body: []byte(body)}) }
	var sent []string
	if n > 100 {
		for _, b := range []string{`not json`, `{"order_id":"","sku":"sku-1","qty":1}`, `{"order_id":"bad-qty","sku":"sku-1","qty":-3}`, ``} {
			send(b)
		}
		n -= 4
	}
	for i := range n {
		if i%5 == 4 {
			send(sent[(i*7919)%len(sent)])
			continue
		}
		qty := 1 + int64(i%3)
		if len(sent) < 10*4 && i%4 == 3 {
			qty = 2_000_000 // more than any sku holds: rejected
		}
		body := orderJSON(len(sent), qty)
		sent = append(sent, body)
		send(body)
	}
	return q.Stats().Ready
}

func orderJSON(id int, qty int64) string {
	return `{"order_id":"o-` + strconv.Itoa(id) + `","sku":"sku-` + strconv.Itoa(id%100) + `","qty":` + strconv.FormatInt(qty, 10) + `}`
}
