package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/onceq/onceq/cmd/onceq/internal/redrive"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
)

func runRedrive(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("onceq redrive", stderr,
		"usage: onceq redrive [-store dynamodb|postgres|redis] [-table NAME [-tenant-layout [-shards N]]] FROM [TENANT] [filters] [-dry-run] [-rate N]",
		"  FROM is one of:",
		"    -sqs-dlq URL [-sqs-source URL]      an SQS dead-letter queue, back to its source queue",
		"    -kafka-dlt TOPIC -kafka-brokers B   a Kafka dead-letter topic, back to each record's original topic",
		"    -outbox                             the store's DEAD outbox entries, back to PENDING (-store postgres or dynamodb)",
		"  TENANT, for a consumer with a tenant function (consumer.WithTenantFunc), is one of:",
		"    -tenant T                           every letter of the run is tenant T's",
		"    -tenant-attribute NAME              each letter's tenant is its SQS message attribute or Kafka header NAME",
		"    -tenant-json-key PATH               each letter's tenant is its JSON body's value at PATH (payload.JSONKey)",
		"  A letter that names no tenant is left where it is, and counted. -tenant-layout needs one of the three.",
		"Sends dead letters back to where they came from without running any message's effect twice: a letter",
		"whose record is COMPLETED is not re-run (the report counts it); one whose record failed is reset to run",
		"again with a full budget, then moved; one whose key a worker holds is left for a later run. An outbox",
		"entry goes back to PENDING with its ID, which a consumer downstream dedups by. Running it twice, or two",
		"at once, moves each letter once. Every decision is logged to stderr with its key_hash, from, to and",
		"reason; the summary goes to stdout.",
	)
	table := fs.String("table", "", "table name (-store dynamodb: required; -store postgres: default "+dedup.DefaultTable+")")
	sf := addStoreFlags(fs)
	sqsDLQ := fs.String("sqs-dlq", "", "the SQS dead-letter queue's URL")
	sqsSource := fs.String("sqs-source", "", "-sqs-dlq: the queue its letters go back to (default: the one queue whose redrive policy names it)")
	hold := fs.Duration("hold", 5*time.Minute, "-sqs-dlq: how long a letter received stays out of other readers' sight while it is decided (1s to 12h)")
	dlt := fs.String("kafka-dlt", "", "the Kafka dead-letter topic")
	brokers := fs.String("kafka-brokers", "", "-kafka-dlt: comma-separated bootstrap brokers")
	group := fs.String("kafka-group", "", "-kafka-dlt: the redrive's consumer group, whose offsets say what was looked at (default onceq-redrive-TOPIC)")
	topic := fs.String("kafka-topic", "", "-kafka-dlt: send every letter to this topic (default: the topic its onceq-original-topic header names)")
	ob := fs.Bool("outbox", false, "redrive the store's DEAD outbox entries")
	tenant := fs.String("tenant", "", "the tenant of every letter of the run, for a consumer with a tenant function")
	tenantAttr := fs.String("tenant-attribute", "", "the SQS message attribute or Kafka header that holds each letter's tenant")
	tenantJSON := fs.String("tenant-json-key", "", "the path of each letter's tenant in its JSON body, as payload.JSONKey reads it")
	tenantLayout := fs.Bool("tenant-layout", false, "-store dynamodb: the table uses the tenant layout (created with -tenant-layout)")
	shards := fs.Int("shards", 1, "-tenant-layout: the store's TenantShards (n of dynamostore.TenantShards)")
	ns := fs.String("namespace", "onceq", "the consumer's namespace (consumer.Namespace), to find each letter's record")
	reason := fs.String("reason", "", "only the letters whose reason holds this text")
	keyHash := fs.String("key-hash", "", "only the letters of this key_hash")
	olderThan := fs.Duration("older-than", 0, "only the letters set aside at least this long ago")
	maxMoves := fs.Int("max", 0, "move at most this many letters (0: all)")
	dry := fs.Bool("dry-run", false, "say what would move, and move nothing")
	rate := fs.Float64("rate", 0, "move at most this many letters a second (0: no bound)")
	removeCompleted := fs.Bool("remove-completed", false, "take letters whose record is COMPLETED off the dead-letter queue or topic (never re-run either way)")
	progress := fs.Duration("progress", 2*time.Second, "how often a progress line goes to stderr on a long run (0: never)")
	if err := fs.Parse(args); err != nil {
		return usageExit(err)
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "onceq redrive: "+format+"\n", a...)
		return 2
	}
	froms := 0
	for _, on := range []bool{*sqsDLQ != "", *dlt != "", *ob} {
		if on {
			froms++
		}
	}
	set := setFlags(fs)
	tenants := 0
	for _, name := range []string{"tenant", "tenant-attribute", "tenant-json-key"} {
		if set[name] {
			tenants++
		}
	}
	filter := redrive.Filter{Reason: *reason, KeyHash: *keyHash, OlderThan: *olderThan, Max: *maxMoves}
	switch {
	case sf.problem(fs) != "":
		return usageErr("%s", sf.problem(fs))
	case froms != 1:
		return usageErr("give one of -sqs-dlq, -kafka-dlt and -outbox")
	case *table == "" && sf.store == storeDynamo:
		return usageErr("-table is required")
	case *ob && sf.store == storeRedis:
		return usageErr("-store redis keeps no outbox")
	case *dlt != "" && len(splitList(*brokers)) == 0:
		return usageErr("-kafka-dlt needs -kafka-brokers")
	case *dlt == "" && (set["kafka-brokers"] || set["kafka-group"] || set["kafka-topic"]):
		return usageErr("-kafka-brokers, -kafka-group and -kafka-topic go with -kafka-dlt")
	case *sqsDLQ == "" && (set["sqs-source"] || set["hold"]):
		return usageErr("-sqs-source and -hold go with -sqs-dlq")
	case *ob && (set["namespace"] || set["tenant"] || set["tenant-attribute"] || set["tenant-json-key"] || set["tenant-layout"] || set["shards"]):
		return usageErr("-outbox reads no record: -namespace, -tenant, -tenant-attribute, -tenant-json-key, -tenant-layout and -shards do not go with it")
	case tenants > 1:
		return usageErr("-tenant, -tenant-attribute and -tenant-json-key each say where a letter's tenant comes from: give one")
	case set["tenant"] && *tenant == "" || set["tenant-attribute"] && *tenantAttr == "" || set["tenant-json-key"] && *tenantJSON == "":
		return usageErr("-tenant, -tenant-attribute and -tenant-json-key must not be empty")
	case set["tenant"] && badTenant(*tenant) != nil:
		return usageErr("-tenant %q: %v", *tenant, badTenant(*tenant))
	case sf.store != storeDynamo && (set["tenant-layout"] || set["shards"]):
		return usageErr("-tenant-layout and -shards are DynamoDB's: the other stores keep a tenant's key as any other")
	case set["shards"] && !*tenantLayout:
		return usageErr("-shards goes with -tenant-layout")
	case *shards < 1 || *shards > 1000:
		return usageErr("-shards %d: want 1 to 1000", *shards)
	case *tenantLayout && tenants == 0:
		// Found under no tenant, every letter would be moved unchecked.
		return usageErr("-tenant-layout: every record of the table is a tenant's: give where each letter's tenant is, -tenant, -tenant-attribute or -tenant-json-key")
	case filter.Validate() != nil:
		return usageErr("%s", filter.Validate())
	case !(*rate >= 0): // NaN too
		return usageErr("-rate %v: want zero (no bound) or more", *rate)
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q: onceq redrive takes flags only", fs.Arg(0))
	}
	// The table's layout and shards, as onceq inspect reads them.
	ins, err := openInspector(ctx, sf, inspectAt{table: *table, tenant: *tenantLayout, shards: *shards})
	if err != nil {
		fmt.Fprintf(stderr, "onceq redrive: %s\n", field(err.Error()))
		return 1
	}
	defer ins.close()
	if ins.caps.Resetter == nil {
		fmt.Fprintf(stderr, "onceq redrive: the %s store hands over no dedup.Resetter in its Capabilities\n", sf.store)
		return 1
	}
	recs := ins.records()
	var tenantOf redrive.TenantFunc
	switch {
	case set["tenant"]:
		tenantOf = redrive.Tenant(*tenant)
	case set["tenant-attribute"]:
		tenantOf = redrive.TenantAttribute(*tenantAttr)
	case set["tenant-json-key"]:
		tenantOf = redrive.TenantJSONKey(*tenantJSON)
	}
	keys := func(k redrive.KeyFunc) redrive.KeyFunc {
		if tenantOf == nil {
			return k
		}
		return redrive.TenantKeys(k, tenantOf)
	}
	var lot redrive.Lot
	switch {
	case *sqsDLQ != "":
		client, err := sqsClient(ctx)
		if err == nil {
			lot, err = redrive.NewSQS(ctx, client, redrive.SQSConfig{DeadLetterQueue: *sqsDLQ, Source: *sqsSource, Key: keys(redrive.BodyKeys(*ns)), Hold: *hold})
		}
		if err != nil {
			fmt.Fprintf(stderr, "onceq redrive: %s\n", field(err.Error()))
			return 1
		}
	case *dlt != "":
		lot, err = redrive.NewKafka(redrive.KafkaConfig{Brokers: splitList(*brokers), DeadLetterTopic: *dlt, Group: *group, Topic: *topic, Key: keys(redrive.RecordKeys(*ns))})
		if err != nil {
			fmt.Fprintf(stderr, "onceq redrive: %s\n", field(err.Error()))
			return 1
		}
	default:
		name := "PostgreSQL"
		if sf.store == storeDynamo {
			name = "DynamoDB"
		}
		o, err := outboxOf(ins.caps, name)
		if err == nil {
			lot, err = redrive.NewOutbox(o, ins.where)
		}
		if err != nil {
			fmt.Fprintf(stderr, "onceq redrive: %s\n", field(err.Error()))
			return 1
		}
	}
	opts := redrive.Options{Rate: *rate, SettleCompleted: *removeCompleted, Logger: slog.New(slog.NewTextHandler(stderr, nil))}
	if *progress > 0 {
		opts.ProgressEvery = *progress
		opts.Progress = func(r redrive.Report) {
			fmt.Fprintf(stderr, "onceq redrive: so far %s (%.0f a second)\n", r, float64(r.Seen)/max(r.Took.Seconds(), 0.001))
		}
	}
	do := redrive.Run
	if *dry {
		do = redrive.Plan
	}
	rep, err := do(ctx, lot, recs, filter, opts)
	fmt.Fprintf(stdout, "onceq redrive: %s\n", rep)
	if err != nil {
		fmt.Fprintf(stderr, "onceq redrive: stopped: %s\n", field(err.Error()))
		if refused := (*dynamostore.RequestRefusedError)(nil); errors.As(err, &refused) {
			// A key of the other layout: the table's is fixed when it is made.
			fmt.Fprintf(stderr, "onceq redrive: table %s refused the record's key: give -tenant-layout for a table made with it, and leave it out for one made without\n", *table)
		}
		return 1
	}
	return 0
}

// badTenant says why tenant cannot key a record (dedup.TenantKey), or nil.
func badTenant(tenant string) error {
	_, err := dedup.EscapeTenant(tenant)
	return err
}
