package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkasource"
	"github.com/onceq/onceq/sources/sqssource"
)

// The senders onceq relay can send through (-send).
const (
	sendSQS   = "sqs"
	sendFranz = "franz"
	sendKafka = "kafka"
)

func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("onceq relay", stderr,
		"usage: onceq relay -store postgres|dynamodb [-table NAME] -send sqs|franz|kafka [-kafka-brokers HOST:PORT,...] [flags]",
		"Sends the store's outbox entries (the messages handlers returned in Result.Outbox) to their destinations,",
		"marking each dispatched, until SIGTERM or SIGINT. Each entry's Destination is an SQS queue URL (-send sqs,",
		"AWS settings from the SDK's environment) or a Kafka topic (-send franz: franz-go with idempotence; -send",
		"kafka: kafka-go). Relays on several machines share the work; an entry the destination refuses for good is",
		"kept as DEAD (onceq inspect -outbox DEAD lists them).",
	)
	table := fs.String("table", "", "table name (-store dynamodb: required; -store postgres: default "+dedup.DefaultTable+")")
	sf := addStoreFlags(fs)
	send := fs.String("send", "", "where the entries go: sqs, franz or kafka (required)")
	brokers := fs.String("kafka-brokers", "", "-send franz or kafka: comma-separated bootstrap brokers")
	owner := fs.String("owner", "", "the relay's owner token (default: a random one); never shared by two relays")
	batch := fs.Int("batch", outbox.DefaultBatchSize, "entries leased and sent per pass")
	passes := fs.Int("concurrency", 1, "passes at once, each leasing its own batch")
	leaseTTL := fs.Duration("lease-ttl", outbox.DefaultLeaseTTL, "how long the relay holds what it leased before another relay may take it over")
	poll := fs.Duration("poll", outbox.DefaultPollInterval, "the wait after a pass that found less than a full batch")
	retention := fs.Duration("retention", outbox.DefaultRetention, "how long dispatched entries are kept")
	deadRetention := fs.Duration("dead-retention", outbox.DefaultDeadRetention, "how long refused (DEAD) entries are kept")
	if err := fs.Parse(args); err != nil {
		return usageExit(err)
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "onceq relay: "+format+"\n", a...)
		return 2
	}
	set := setFlags(fs)
	kafka := *send == sendFranz || *send == sendKafka
	switch {
	case sf.problem(fs) != "":
		return usageErr("%s", sf.problem(fs))
	case sf.store == storeRedis:
		return usageErr("-store redis keeps no outbox: Redis has no transactions to commit outgoing messages with COMPLETED")
	case *table == "" && sf.store == storeDynamo:
		return usageErr("-table is required")
	case *send != sendSQS && !kafka:
		return usageErr("-send %q: want sqs, franz or kafka", *send)
	case kafka && len(splitList(*brokers)) == 0:
		return usageErr("-send %s needs -kafka-brokers", *send)
	case !kafka && set["kafka-brokers"]:
		return usageErr("-kafka-brokers goes with -send franz or kafka")
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q: onceq relay takes flags only", fs.Arg(0))
	}
	if *table == "" {
		*table = dedup.DefaultTable
	}
	// SIGTERM stops it too, as a service manager sends; the marks of the
	// pass under way are written first.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()

	ob, closeStore, err := openOutbox(ctx, sf, *table)
	if err != nil {
		fmt.Fprintf(stderr, "onceq relay: %s\n", field(err.Error()))
		return 1
	}
	defer closeStore()
	sender, closeSender, err := openSender(ctx, *send, splitList(*brokers))
	if err != nil {
		fmt.Fprintf(stderr, "onceq relay: %s\n", field(err.Error()))
		return 1
	}
	defer closeSender()
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	opts := []outbox.Option{outbox.BatchSize(*batch), outbox.Concurrency(*passes), outbox.LeaseTTL(*leaseTTL), outbox.PollInterval(*poll),
		outbox.Retention(*retention), outbox.DeadRetention(*deadRetention), outbox.WithLogger(logger)}
	if *owner != "" {
		opts = append(opts, outbox.Owner(*owner))
	}
	if n, ok := ob.(interface{ Wait(context.Context) error }); ok {
		// The store notifies its commits (PostgreSQL's LISTEN): a pass
		// starts as each lands, the polls are the fallback.
		opts = append(opts, outbox.WakeOn(n.Wait))
	}
	relay, err := outbox.NewRelay(ob, sender, opts...)
	if err != nil {
		return usageErr("%s", field(err.Error()))
	}
	fmt.Fprintf(stdout, "onceq relay: sending the %s outbox of %s through %s as %s\n", sf.store, field(*table), *send, field(relay.Owner()))
	if err := relay.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "onceq relay: %s\n", field(err.Error()))
		return 1
	}
	return 0
}

// splitList is a comma-separated list, blanks dropped.
func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// outboxOf is the outbox of a store that commits outgoing messages with
// COMPLETED: the relay's view its Capabilities hand over.
func outboxOf(caps dedup.Capabilities, name string) (outbox.Store, error) {
	ob := caps.Outbox
	if ob == nil {
		return nil, fmt.Errorf("the %s store keeps no outbox", name)
	}
	return ob, nil
}

// openOutbox opens the outbox of the chosen store.
func openOutbox(ctx context.Context, sf *storeFlags, table string) (outbox.Store, func(), error) {
	if sf.store == storePostgres {
		conn, _, err := sf.connectPostgres(ctx)
		if err != nil {
			return nil, nil, err
		}
		// A pool on the same settings: the store's wake signal (LISTEN)
		// takes a connection of its own from it.
		cfg, err := pgxpool.ParseConfig("")
		if err != nil {
			_ = conn.Close(ctx)
			return nil, nil, err
		}
		cfg.ConnConfig = conn.Config().Copy()
		_ = conn.Close(ctx)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		st, err := openPostgres(pool, table)
		if err == nil {
			var ob outbox.Store
			if ob, err = outboxOf(st.Capabilities(), "PostgreSQL"); err == nil {
				return ob, func() {
					if c, ok := ob.(interface{ Close(context.Context) error }); ok {
						_ = c.Close(context.WithoutCancel(ctx))
					}
					pool.Close()
				}, nil
			}
		}
		pool.Close()
		return nil, nil, err
	}
	client, err := dynamoClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	st, err := openStore(client, table, false)
	if err != nil {
		return nil, nil, err
	}
	ob, err := outboxOf(st.Capabilities(), "DynamoDB")
	return ob, func() {}, err
}

// openSender builds the sender -send names.
func openSender(ctx context.Context, send string, brokers []string) (outbox.Sender, func(), error) {
	switch send {
	case sendFranz:
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			return nil, nil, fmt.Errorf("franz-go client: %w", err)
		}
		s, err := franzsource.NewSender(cl)
		if err != nil {
			cl.Close()
			return nil, nil, err
		}
		return s, cl.Close, nil
	case sendKafka:
		w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), Balancer: &kafkago.Hash{}, RequiredAcks: kafkago.RequireAll,
			BatchTimeout: 5 * time.Millisecond}
		s, err := kafkasource.NewSender(w)
		if err != nil {
			return nil, nil, err
		}
		return s, func() { _ = w.Close() }, nil
	}
	client, err := sqsClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	s, err := sqssource.NewSender(client)
	if err != nil {
		return nil, nil, err
	}
	return s, func() {}, nil
}

// inspectOutbox lists the outbox entries in state.
func inspectOutbox(ctx context.Context, fs *flag.FlagSet, sf *storeFlags, table string, state outbox.State, limit int, stdout, stderr io.Writer) int {
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "onceq inspect: "+format+"\n", a...)
		return 2
	}
	set := setFlags(fs)
	for name := range set {
		switch name {
		case "outbox", "limit", "table", "store", "postgres-url", "url", "connect-timeout":
		default:
			return usageErr("-outbox lists entries: -%s does not go with it", name)
		}
	}
	switch {
	case sf.problem(fs) != "":
		return usageErr("%s", sf.problem(fs))
	case sf.store == storeRedis:
		return usageErr("-store redis keeps no outbox")
	case state != outbox.Dead && state != outbox.Pending && state != outbox.Dispatched:
		return usageErr("-outbox %q: want DEAD, PENDING or DISPATCHED", state)
	case table == "" && sf.store == storeDynamo:
		return usageErr("-table is required")
	case limit < 1:
		return usageErr("-limit must be positive")
	case fs.NArg() > 0:
		return usageErr("-outbox takes no KEY")
	}
	if table == "" {
		table = dedup.DefaultTable
	}
	ins, err := openInspector(ctx, sf, inspectAt{table: table})
	if err != nil {
		fmt.Fprintf(stderr, "onceq inspect: %s\n", field(err.Error()))
		return 1
	}
	defer ins.close()
	entries, err := ins.OutboxEntries(ctx, state, limit)
	if err != nil {
		fmt.Fprintf(stderr, "onceq inspect: listing the outbox: %s\n", field(err.Error()))
		return 1
	}
	for _, e := range entries {
		printEntry(stdout, e)
	}
	fmt.Fprintf(stdout, "%d entries in state %s", len(entries), state)
	if len(entries) == limit {
		fmt.Fprintf(stdout, " (cut at -limit %d)", limit)
	}
	fmt.Fprintln(stdout)
	if len(entries) == 0 {
		return 1
	}
	return 0
}

// printEntry prints an outbox entry on its line, and its reason on the
// next when it has one. attempts= counts failed sends, releases= the
// times a relay gave the entry back unsent (held behind a failed entry
// of its lane, or left when the relay stopped).
func printEntry(w io.Writer, e outbox.Entry) {
	fmt.Fprintf(w, "%s  destination=%s ordering_key=%s seq=%d attempts=%d releases=%d bytes=%d created=%s expires=%s\n",
		field(e.ID), field(e.Destination), field(e.OrderingKey), e.Seq, e.Attempts, e.Releases, len(e.Body),
		e.CreatedAt.UTC().Format(time.RFC3339), e.ExpiresAt.UTC().Format(time.RFC3339))
	if e.LastError != "" {
		fmt.Fprintf(w, "    reason: %s\n", field(e.LastError))
	}
}
