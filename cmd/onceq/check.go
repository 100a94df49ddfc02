package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
	"github.com/onceq/onceq/sources/sqssource"
)

// checkReport prints one line per check and remembers whether one failed.
type checkReport struct {
	w      io.Writer
	failed bool
}

func (r *checkReport) ok(subject, format string, args ...any) { r.line("ok", subject, format, args...) }
func (r *checkReport) warn(subject, format string, args ...any) {
	r.line("WARN", subject, format, args...)
}

func (r *checkReport) fail(subject, format string, args ...any) {
	r.failed = true
	r.line("FAIL", subject, format, args...)
}

func (r *checkReport) line(kind, subject, format string, args ...any) {
	fmt.Fprintf(r.w, "%-4s %s: %s\n", kind, field(subject), field(oneLine(fmt.Sprintf(format, args...))))
}

// warnings prints, as WARN lines of subject, what the library's checks log
// at WARN or above (a table without TTL): the checks report those through
// their logger.
func (r *checkReport) warnings(subject string) (*slog.Logger, func()) {
	h := &warnLog{}
	return slog.New(h), func() {
		for _, m := range h.take() {
			r.warn(subject, "%s", m)
		}
	}
}

type warnLog struct {
	mu   sync.Mutex
	msgs []string
}

func (h *warnLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *warnLog) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	h.msgs = append(h.msgs, b.String())
	h.mu.Unlock()
	return nil
}

// The subject of each line already names the table or queue.
func (h *warnLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnLog) WithGroup(string) slog.Handler      { return h }

func (h *warnLog) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.msgs
	h.msgs = nil
	return m
}

type checkFlags struct {
	table            string
	tenant           bool
	queueURL, dlqURL string
	brokers          string
	topic, dlqTopic  string
	maxAttempts      int
	leaseTTL         time.Duration
	regions          string
}

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("onceq check", stderr,
		"usage: onceq check [-table NAME [-tenant-layout] [-regions R1,R2]] [-sqs-queue-url URL [-sqs-dlq-url URL]]",
		"                   [-kafka-brokers HOST:PORT,... -kafka-topic T -kafka-dlq-topic D] [-max-attempts 5] [-lease-ttl 60s]",
		"       onceq check -store postgres [-table NAME] [-postgres-url URL] [queue or topic flags as above]",
		"       onceq check -store redis [-redis-addr HOST:PORT|URL] [-redis-prefix onceq:] [queue or topic flags as above]",
		"Runs the checks a worker runs at start and prints one line per check: ok, WARN or FAIL with the reason.",
		"-store postgres: the server answers the user (a refusal names server, database and user, never the password),",
		"the table exists in create-table's layout (columns, key on id, expiry index) and the user may read and write it.",
		"-store redis: the server answers the user, who may run the store's scripts; no eviction, persistence on;",
		"the keys under the prefix are records this version reads.",
		"Exit 1 when a check fails, 0 otherwise. AWS endpoint, region and credentials come from the SDK's standard settings.",
	)
	var f checkFlags
	fs.StringVar(&f.table, "table", "", "idempotency table: exists, ACTIVE, key schema of the layout, readable; TTL on expires_at (-store postgres: default "+dedup.DefaultTable+")")
	sf := addStoreFlags(fs)
	fs.BoolVar(&f.tenant, "tenant-layout", false, "the table uses the tenant layout (created with -tenant-layout)")
	fs.StringVar(&f.regions, "regions", "", "comma-separated regions to check the table in (default: every replica region of a Global Table, else the configured region)")
	fs.StringVar(&f.queueURL, "sqs-queue-url", "", "SQS queue: reachable, has a dead-letter queue, redrive policy fits the worker")
	fs.StringVar(&f.dlqURL, "sqs-dlq-url", "", "the worker's SQS dead-letter queue (default: the queue's redrive policy)")
	fs.StringVar(&f.brokers, "kafka-brokers", "", "comma-separated Kafka bootstrap brokers")
	fs.StringVar(&f.topic, "kafka-topic", "", "Kafka topic the worker reads")
	fs.StringVar(&f.dlqTopic, "kafka-dlq-topic", "", "the worker's Kafka dead-letter topic")
	fs.IntVar(&f.maxAttempts, "max-attempts", 5, "the worker's consumer.MaxAttempts")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", 60*time.Second, "the worker's consumer.LeaseTTL")
	if err := fs.Parse(args); err != nil {
		return usageExit(err)
	}
	var problem string
	switch {
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	case f.dlqURL != "" && f.queueURL == "":
		problem = "-sqs-dlq-url needs -sqs-queue-url"
	case f.regions != "" && f.table == "":
		problem = "-regions needs -table"
	case sf.problem(fs) != "":
		problem = sf.problem(fs)
	case sf.store != storeDynamo && (f.tenant || f.regions != ""):
		problem = "-tenant-layout and -regions are DynamoDB's"
	case sf.store == storeRedis && f.table != "":
		problem = "Redis has no table: its records are keys under -redis-prefix"
	case f.table == "" && f.queueURL == "" && f.topic == "" && sf.store == storeDynamo:
		problem = "nothing to check: give -table, -sqs-queue-url or -kafka-topic"
	case f.topic != "" && len(brokerList(f.brokers)) == 0:
		problem = "-kafka-topic needs -kafka-brokers"
	case f.maxAttempts < 1:
		problem = fmt.Sprintf("-max-attempts %d: want at least 1", f.maxAttempts)
	case f.leaseTTL <= 0:
		problem = fmt.Sprintf("-lease-ttl %v: want a positive duration", f.leaseTTL)
	}
	if problem != "" {
		fmt.Fprintf(stderr, "onceq check: %s\n", problem)
		return 2
	}
	r := &checkReport{w: stdout}
	switch {
	case sf.store == storePostgres:
		checkPostgres(ctx, r, sf, f.table)
	case sf.store == storeRedis:
		checkRedis(ctx, r, sf)
	case f.table != "":
		checkTable(ctx, r, f)
	}
	if f.queueURL != "" {
		checkQueue(ctx, r, f)
	}
	if f.topic != "" {
		checkTopics(ctx, r, f)
	}
	if r.failed {
		return 1
	}
	return 0
}

func checkTable(ctx context.Context, r *checkReport, f checkFlags) {
	subject := "table " + f.table
	cfg, err := awsConfig(ctx)
	if err != nil {
		r.fail(subject, "%v", err)
		return
	}
	regions := brokerList(f.regions)
	if len(regions) == 0 {
		regions = replicaRegions(ctx, cfg, f.table)
	}
	if len(regions) <= 1 && (len(regions) == 0 || regions[0] == cfg.Region) {
		checkTableIn(ctx, r, f, ddb.NewFromConfig(cfg), subject)
		return
	}
	// A Global Table: every region's replica is checked, as a worker
	// with WithRegionalClients would use each.
	for _, region := range regions {
		c := cfg.Copy()
		c.Region = region
		checkTableIn(ctx, r, f, ddb.NewFromConfig(c), fmt.Sprintf("%s (region %s)", subject, region))
	}
}

// replicaRegions lists the regions of table's replicas when it is a
// Global Table (none otherwise, or when it cannot be described: the
// table's own check then says why).
func replicaRegions(ctx context.Context, cfg aws.Config, table string) []string {
	out, err := ddb.NewFromConfig(cfg).DescribeTable(ctx, &ddb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil || out.Table == nil {
		return nil
	}
	var regions []string
	for _, r := range out.Table.Replicas {
		if name := aws.ToString(r.RegionName); name != "" {
			regions = append(regions, name)
		}
	}
	return regions
}

func checkTableIn(ctx context.Context, r *checkReport, f checkFlags, client *ddb.Client, subject string) {
	logger, flush := r.warnings(subject)
	defer flush()
	store, err := openStore(client, f.table, f.tenant, dynamostore.WithLogger(logger))
	if err != nil {
		r.fail(subject, "%v", err)
		return
	}
	layout, other := "key layout", "-tenant-layout"
	if f.tenant {
		layout, other = "tenant layout", "no -tenant-layout"
	}
	var missing *ddbtypes.ResourceNotFoundException
	var wrong *dynamostore.LayoutError
	switch err := store.Check(ctx); {
	case errors.As(err, &missing):
		r.fail(subject, "does not exist: create it with `onceq create-table -table %s`", f.table)
	case errors.As(err, &wrong):
		r.fail(subject, "its key schema is not the %s: check with %s, or create a table of this layout", layout, other)
	case err != nil:
		r.fail(subject, "%v", err)
	default:
		r.ok(subject, "exists, %s, readable", layout)
	}
}

func checkQueue(ctx context.Context, r *checkReport, f checkFlags) {
	subject := "queue " + lastElem(f.queueURL)
	client, err := sqsClient(ctx)
	if err != nil {
		r.fail(subject, "%v", err)
		return
	}
	var opts []sqssource.Option
	if f.dlqURL != "" {
		// Opened on its own first, so that a fault of the dead-letter queue
		// is told apart from one of the queue.
		if checkSQSQueue(ctx, r, client, "dead-letter queue "+lastElem(f.dlqURL), f.dlqURL) != nil {
			opts = append(opts, sqssource.DeadLetterQueue(f.dlqURL))
		}
	}
	src := checkSQSQueue(ctx, r, client, subject, f.queueURL, opts...)
	if src == nil {
		return
	}
	if src.DeadLetterQueueURL() == "" {
		r.fail(subject, "no dead-letter queue: pass -sqs-dlq-url, or give the queue a redrive policy (a consumer refuses a source without one)")
		return
	}
	if f.dlqURL == "" {
		r.ok(subject, "dead-letter queue %s from the redrive policy, reachable", lastElem(src.DeadLetterQueueURL()))
	}
	checkRedrive(r, subject, src.MaxReceiveCount(), f.maxAttempts, f.leaseTTL, src.Capabilities().DeliveryTimeout)
}

// checkSQSQueue opens url as a Source (which reads its attributes and
// resolves its redrive policy), runs its Check and prints the line; the
// Source it returns is closed already and serves only its accessors.
func checkSQSQueue(ctx context.Context, r *checkReport, client *awssqs.Client, subject, url string, opts ...sqssource.Option) *sqssource.Source {
	logger, flush := r.warnings(subject)
	defer flush()
	src, err := sqssource.New(ctx, client, url, append(opts, sqssource.WithLogger(logger))...)
	if err != nil {
		r.fail(subject, "%s", reason(err))
		return nil
	}
	defer func() { _ = src.Close(context.WithoutCancel(ctx)) }()
	if err := src.Check(ctx); err != nil {
		r.fail(subject, "%s", reason(err))
		return nil
	}
	fifo := ""
	if src.FIFO() {
		fifo = ", FIFO"
	}
	r.ok(subject, "reachable (visibility %v%s)", src.Capabilities().DeliveryTimeout, fifo)
	return src
}

func checkRedrive(r *checkReport, subject string, maxReceive, maxAttempts int, leaseTTL, visibility time.Duration) {
	subject += " redrive policy"
	if maxReceive == 0 {
		r.ok(subject, "none: SQS never moves a message by itself; the worker dead-letters after %d attempts", maxAttempts)
		return
	}
	need := consumer.ReceivesNeeded(maxAttempts, leaseTTL, visibility)
	formula := fmt.Sprintf("%d = max-attempts %d + 2 × ceil(lease-ttl %v / visibility %v)", need, maxAttempts, leaseTTL, visibility)
	if maxReceive < need {
		r.warn(subject, "maxReceiveCount %d is below %s: SQS may move a message to the dead-letter queue, with no reason, before the worker has spent its attempts; raise it to %d",
			maxReceive, formula, need)
		return
	}
	r.ok(subject, "maxReceiveCount %d is at least %s", maxReceive, formula)
}

func checkTopics(ctx context.Context, r *checkReport, f checkFlags) {
	subject := "kafka topic " + f.topic
	topics := f.topic
	opts := []kafkasource.Option{}
	if f.dlqTopic != "" {
		topics += ", dead-letter topic " + f.dlqTopic
		opts = append(opts, kafkagroup.DeadLetterTopic(f.dlqTopic))
	}
	// A group of its own, so that the check never makes the worker's group
	// rebalance. Its client's own log lines (a join cut short by Close)
	// say nothing about the deployment: the verdict comes from the errors.
	var b [4]byte
	_, _ = rand.Read(b[:])
	src, err := kafkasource.New(ctx, brokerList(f.brokers), "onceq-check-"+hex.EncodeToString(b[:]), []string{f.topic},
		append(opts, kafkagroup.WithLogger(slog.New(slog.DiscardHandler)))...)
	if err == nil {
		err = src.Check(ctx)
		_ = src.Close(context.WithoutCancel(ctx))
	}
	var dial *net.OpError
	switch {
	case errors.Is(err, kafkagroup.ErrUnknownTopic):
		r.fail(subject, "%v: create it on the cluster", err)
		return
	case errors.As(err, &dial):
		r.fail(subject, "cannot reach the brokers %s: %v", f.brokers, dial.Err)
		return
	case err != nil:
		r.fail(subject, "%s", reason(err))
		return
	}
	r.ok(subject, "%s reachable on %s", topics, f.brokers)
	if f.dlqTopic == "" {
		r.fail(subject, "no dead-letter topic: pass -kafka-dlq-topic (a consumer refuses a source without one)")
	}
}

// reason says why a queue or topic check failed, on one line.
func reason(err error) string {
	if noQueue(err) {
		return "does not exist: create it, or fix the URL"
	}
	return oneLine(err.Error())
}

func noQueue(err error) bool {
	var dne *sqstypes.QueueDoesNotExist
	var api smithy.APIError
	return errors.As(err, &dne) ||
		errors.As(err, &api) && (api.ErrorCode() == "QueueDoesNotExist" || api.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue")
}

// lastElem is a queue URL's last path element, its name.
func lastElem(url string) string { return url[strings.LastIndexByte(url, '/')+1:] }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func brokerList(s string) []string {
	var out []string
	for b := range strings.SplitSeq(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}
