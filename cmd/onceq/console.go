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
	"net/http"
	"strings"
	"time"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/cmd/onceq/internal/redrive"
	"github.com/onceq/onceq/dedup"
)

func runConsole(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("onceq console", stderr,
		"usage: onceq console -table NAME [-addr 127.0.0.1:8080] [-actions] [store flags]",
		"       onceq console -store postgres|redis ... [-addr 127.0.0.1:8080] [-actions]",
		"Serves a web page of the store: a message's story by key or key_hash (its record, attempts,",
		"takeovers, lease, response, reason and outgoing entries), the in-flight leases, the dead letters",
		"and failures by reason, the outbox backlog per lane and its DEAD entries, batch mode's offsets.",
		"Read-only unless -actions: then a record can be forgotten, a message's DEAD outbox entries",
		"redriven (back to PENDING, as onceq redrive does), and, given -sqs-dlq or -kafka-dlt, a message's",
		"dead letter sent back to its source with its record reset (never one whose record is COMPLETED),",
		"each action confirmed on a page of its own and refused from any other site. A tenant's record",
		"(consumer.WithTenantFunc) has its dead letter redriven only by a console told where each letter's",
		"tenant is (-tenant-attribute or -tenant-json-key), and a record without a tenant only by one not told.",
		"The page loads nothing from elsewhere; it works offline.",
		"It listens on loopback; an address other machines can reach needs -public (there is no login:",
		"whoever reaches the page reads every key).",
	)
	table := fs.String("table", "", "table name (required; -store postgres: default "+dedup.DefaultTable+")")
	sf := addStoreFlags(fs)
	addr := fs.String("addr", "127.0.0.1:8080", "the address to listen on, HOST:PORT (port 0: any free port)")
	public := fs.Bool("public", false, "allow an -addr that is not loopback")
	actions := fs.Bool("actions", false, "offer the actions that write (forget a record, redrive DEAD outbox entries, and dead letters with -sqs-dlq or -kafka-dlt); read-only without")
	sqsDLQ := fs.String("sqs-dlq", "", "-actions: the SQS dead-letter queue whose letters a message's page redrives")
	sqsSource := fs.String("sqs-source", "", "-sqs-dlq: the queue its letters go back to (default: the one queue whose redrive policy names it)")
	dlt := fs.String("kafka-dlt", "", "-actions: the Kafka dead-letter topic whose letters a message's page redrives (read from its start, committing no offsets)")
	brokers := fs.String("kafka-brokers", "", "-kafka-dlt: comma-separated bootstrap brokers")
	topic := fs.String("kafka-topic", "", "-kafka-dlt: send a letter to this topic (default: the topic its onceq-original-topic header names)")
	tenantAttr := fs.String("tenant-attribute", "", "-sqs-dlq or -kafka-dlt, for a consumer with a tenant function: the SQS message attribute or Kafka header that holds each letter's tenant")
	tenantJSON := fs.String("tenant-json-key", "", "-sqs-dlq or -kafka-dlt, for a consumer with a tenant function: the path of each letter's tenant in its JSON body (payload.JSONKey)")
	c := consoleConfig{}
	fs.StringVar(&c.namespace, "namespace", "onceq", "the consumers' namespace (consumer.Namespace), for keys typed in")
	tenant := fs.Bool("tenant-layout", false, "DynamoDB: the table uses the tenant layout, and lists by tenant")
	shards := fs.Int("shards", 1, "DynamoDB tenant layout: the store's TenantShards")
	fs.IntVar(&c.pageSize, "page-size", 50, "records or entries on a page")
	fs.DurationVar(&c.since, "since", 24*time.Hour, "lists show what was created within this long")
	fs.IntVar(&c.scanLimit, "scan-limit", defaultScanLimit, "a key_hash search reads at most this many records")
	if err := fs.Parse(args); err != nil {
		return usageExit(err)
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "onceq console: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q: flags only", fs.Arg(0))
	case sf.problem(fs) != "":
		return usageErr("%s", sf.problem(fs))
	case sf.store == storeRedis && *table != "":
		return usageErr("Redis has no table: its records are keys under -redis-prefix")
	case *table == "" && sf.store == storeDynamo:
		return usageErr("-table is required")
	case sf.store != storeDynamo && (*tenant || *shards != 1):
		return usageErr("-tenant-layout and -shards are DynamoDB's")
	case c.pageSize < 1 || c.pageSize > 500:
		return usageErr("-page-size %d: want 1 to 500", c.pageSize)
	case c.since <= 0 || c.scanLimit < 1 || *shards < 1 || *shards > 1000:
		return usageErr("-since and -scan-limit must be positive, -shards 1 to 1000")
	case (*sqsDLQ != "" || *dlt != "") && !*actions:
		return usageErr("-sqs-dlq and -kafka-dlt redrive dead letters, an action: they need -actions")
	case *sqsDLQ != "" && *dlt != "":
		return usageErr("give one of -sqs-dlq and -kafka-dlt")
	case *sqsDLQ == "" && *sqsSource != "":
		return usageErr("-sqs-source goes with -sqs-dlq")
	case *dlt != "" && len(splitList(*brokers)) == 0:
		return usageErr("-kafka-dlt needs -kafka-brokers")
	case *dlt == "" && (*brokers != "" || *topic != ""):
		return usageErr("-kafka-brokers and -kafka-topic go with -kafka-dlt")
	case *sqsDLQ == "" && *dlt == "" && (*tenantAttr != "" || *tenantJSON != ""):
		return usageErr("-tenant-attribute and -tenant-json-key say where a dead letter's tenant is: they go with -sqs-dlq or -kafka-dlt")
	case *tenantAttr != "" && *tenantJSON != "":
		return usageErr("-tenant-attribute and -tenant-json-key each say where a letter's tenant comes from: give one")
	}
	if err := listenAllowed(*addr, *public); err != nil {
		return usageErr("%v", err)
	}
	ins, err := openInspector(ctx, sf, inspectAt{table: *table, tenant: *tenant, shards: *shards, listing: *tenant})
	if err != nil {
		fmt.Fprintf(stderr, "onceq console: %s\n", field(err.Error()))
		return 1
	}
	defer ins.close()
	c.tenants = *tenant || sf.store != storeDynamo
	log := slog.New(slog.NewTextHandler(stderr, nil))
	srv, err := newConsole(ins, c, *actions, log)
	if err != nil {
		fmt.Fprintf(stderr, "onceq console: %v\n", err)
		return 1
	}
	lt := letterTenants{}
	switch {
	case *tenantAttr != "":
		lt.from, lt.of = "-tenant-attribute "+*tenantAttr, redrive.TenantAttribute(*tenantAttr)
	case *tenantJSON != "":
		lt.from, lt.of = "-tenant-json-key "+*tenantJSON, redrive.TenantJSONKey(*tenantJSON)
	}
	switch {
	case *sqsDLQ != "":
		srv.letters, err = sqsLetters(ctx, ins, redrive.SQSConfig{DeadLetterQueue: *sqsDLQ, Source: *sqsSource, Key: lt.keys(redrive.BodyKeys(c.namespace))}, log)
	case *dlt != "":
		srv.letters, err = kafkaLetters(ins, redrive.KafkaConfig{Brokers: splitList(*brokers), DeadLetterTopic: *dlt, Topic: *topic,
			Key: lt.keys(redrive.RecordKeys(c.namespace)), NoGroup: true}, log)
	}
	if srv.letters != nil {
		srv.letters.tenants = lt.from
	}
	if err != nil {
		fmt.Fprintf(stderr, "onceq console: %s\n", field(err.Error()))
		return 1
	}
	if host, _, _ := net.SplitHostPort(*addr); net.ParseIP(host) == nil {
		srv.host = host
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "onceq console: listen on %s: %v\n", *addr, err)
		return 1
	}
	mode := "read-only (-actions to forget records and redrive DEAD outbox entries)"
	if *actions {
		mode = "with actions: forget a record, redrive DEAD outbox entries"
		if srv.letters != nil {
			mode += ", redrive dead letters from " + srv.letters.from
		}
	}
	fmt.Fprintf(stdout, "onceq console on http://%s/ over %s, %s; Ctrl-C stops it\n", ln.Addr(), ins.where, mode)
	if err := srv.serve(ctx, ln); err != nil {
		fmt.Fprintf(stderr, "onceq console: %v\n", err)
		return 1
	}
	return 0
}

// listenAllowed refuses an address other machines may reach, unless
// public: the page has no login.
func listenAllowed(addr string, public bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr %q: want HOST:PORT (%v)", addr, err)
	}
	if public || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	what := "a name that may resolve to any address"
	if host == "" || net.ParseIP(host) != nil {
		what = "not loopback"
	}
	return fmt.Errorf("-addr %q is %s: the console has no login, and whoever reaches it reads every key; give -public to serve it there all the same", addr, what)
}

// consoleConfig is what the console's pages show and how much.
type consoleConfig struct {
	namespace string
	pageSize  int
	since     time.Duration
	scanLimit int
	// tenants: the store lists by tenant (DynamoDB's tenant layout, or a
	// store that filters keys by their tenant's prefix).
	tenants bool
}

// console serves the pages over one store.
type console struct {
	ins *inspected
	cfg consoleConfig
	// forget is the store's Forgetter when -actions is on, else nil.
	forget dedup.Forgetter
	// redrive sends a message's DEAD outbox entries back to PENDING, as
	// onceq redrive does; nil without -actions or an outbox.
	redrive outboxRedrive
	// letters redrives a message's dead letters (-sqs-dlq or -kafka-dlt
	// with -actions); nil without.
	letters *letterRedrive
	// offsets is the store's batch view, nil when it keeps none.
	offsets batch.Store
	// token is the form token of this run, sent with every action.
	token string
	// host is the name -addr gave, answered besides IP addresses and
	// localhost ("" when it gave an address or none).
	host string
	log  *slog.Logger
	now  func() time.Time
}

func newConsole(ins *inspected, cfg consoleConfig, actions bool, log *slog.Logger) (*console, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	c := &console{ins: ins, cfg: cfg, token: hex.EncodeToString(b), log: log, now: time.Now}
	if actions {
		f := ins.caps.Forgetter
		if f == nil {
			return nil, fmt.Errorf("-actions: the store (%T) hands over no dedup.Forgetter in its Capabilities", ins.Inspector)
		}
		c.forget = f
		c.redrive = redriveOf(ins, log)
	}
	c.offsets = ins.caps.Offsets
	return c, nil
}

// serve answers on ln until ctx is done.
func (c *console) serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: c.handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := hs.Shutdown(shut)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// outboxRedrive redrives the DEAD outbox entries of the message whose
// key has keyHash.
type outboxRedrive func(ctx context.Context, keyHash string) (redrive.Report, error)

// redriveOf is onceq redrive's outbox run over the store, for one
// message's entries at a time; nil for a store that keeps no outbox.
func redriveOf(ins *inspected, log *slog.Logger) outboxRedrive {
	ob, err := outboxOf(ins.caps, "")
	if ins.caps.Resetter == nil || err != nil {
		return nil
	}
	recs := ins.records()
	return func(ctx context.Context, keyHash string) (redrive.Report, error) {
		lot, err := redrive.NewOutbox(ob, ins.where)
		if err != nil {
			return redrive.Report{}, err
		}
		return redrive.Run(ctx, lot, recs, redrive.Filter{KeyHash: keyHash}, redrive.Options{Logger: log})
	}
}

// letterRedrive is onceq redrive's run over a dead-letter queue or topic,
// for one message's letters at a time.
type letterRedrive struct {
	// from names the queue or topic ("SQS queue orders-dlq").
	from string
	// tenants names the flag the letters' tenants are read by
	// ("-tenant-attribute tenant"); "" when they are keyed without one.
	tenants string
	run     func(ctx context.Context, keyHash string) (redrive.Report, error)
}

// letterTenants is where the console reads each dead letter's tenant:
// from, the flag that says so ("" and of nil: letters have no tenant).
type letterTenants struct {
	from string
	of   redrive.TenantFunc
}

// keys is k, behind each letter's tenant when the letters have one.
func (t letterTenants) keys(k redrive.KeyFunc) redrive.KeyFunc {
	if t.of == nil {
		return k
	}
	return redrive.TenantKeys(k, t.of)
}

// refuses says why the letters of the record of key cannot be told from
// other messages' letters, or "". A tenant's key is found in a letter
// only with that letter's own tenant: keyed under the record's tenant, a
// letter of another tenant with the same key would pass for it. So a
// tenant's record needs the letters' tenants read, and a record without a
// tenant needs them not read.
func (l *letterRedrive) refuses(key string) string {
	switch {
	case hasTenant(key) && l.tenants == "":
		return "this record is a tenant's (its consumer has a tenant function), and this console reads no dead letter's tenant, " +
			"so it cannot tell this tenant's letter from another tenant's with the same key: start it with -tenant-attribute NAME " +
			"or -tenant-json-key PATH, where the consumer reads the tenant (or run onceq redrive -tenant)"
	case !hasTenant(key) && l.tenants != "":
		return "this record has no tenant, and this console keys each dead letter by its tenant (" + l.tenants +
			"): a console started without it redrives this record's letters"
	}
	return ""
}

// hasTenant: key is a tenant's stored key (dedup.TenantKey): its first
// part is followed by dedup.TenantMark.
func hasTenant(key string) bool {
	_, rest, ok := strings.Cut(key, "#")
	return ok && strings.HasPrefix(rest, dedup.TenantMark)
}

// sqsLetters redrives the letters of cfg's dead-letter queue, its source
// queue found once now when cfg names none. A letter of another message
// is looked at and given back at once.
func sqsLetters(ctx context.Context, ins *inspected, cfg redrive.SQSConfig, log *slog.Logger) (*letterRedrive, error) {
	client, err := sqsClient(ctx)
	if err != nil {
		return nil, err
	}
	lot, err := redrive.NewSQS(ctx, client, cfg)
	if err != nil {
		return nil, err
	}
	_ = lot.Close(ctx) // nothing received: it found the source queue
	cfg.Source = lot.Source()
	cfg.Hold = time.Minute
	return lettersOver(ins, "SQS queue "+cfg.DeadLetterQueue[strings.LastIndexByte(cfg.DeadLetterQueue, '/')+1:], func(ctx context.Context) (redrive.Lot, error) {
		return redrive.NewSQS(ctx, client, cfg)
	}, log)
}

// kafkaLetters redrives the letters of cfg's dead-letter topic, read from
// its start with no consumer group: the group of onceq redrive's runs
// keeps its offsets.
func kafkaLetters(ins *inspected, cfg redrive.KafkaConfig, log *slog.Logger) (*letterRedrive, error) {
	k, err := redrive.NewKafka(cfg)
	if err != nil {
		return nil, err
	}
	_ = k.Close(context.Background()) // it checked cfg: it commits nothing
	return lettersOver(ins, "Kafka topic "+cfg.DeadLetterTopic, func(context.Context) (redrive.Lot, error) {
		return redrive.NewKafka(cfg)
	}, log)
}

func lettersOver(ins *inspected, from string, lot func(context.Context) (redrive.Lot, error), log *slog.Logger) (*letterRedrive, error) {
	if ins.caps.Resetter == nil {
		return nil, fmt.Errorf("-sqs-dlq and -kafka-dlt: the store (%T) hands over no dedup.Resetter in its Capabilities", ins.Inspector)
	}
	recs := ins.records()
	return &letterRedrive{from: from, run: func(ctx context.Context, keyHash string) (redrive.Report, error) {
		l, err := lot(ctx)
		if err != nil {
			return redrive.Report{}, err
		}
		return redrive.Run(ctx, l, recs, redrive.Filter{KeyHash: keyHash}, redrive.Options{Logger: log})
	}}, nil
}
