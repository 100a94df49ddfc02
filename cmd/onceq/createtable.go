package main

import (
	"context"
	"fmt"
	"io"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
)

func runCreateTable(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("onceq create-table", stderr,
		"usage: onceq create-table -table NAME [-tenant-layout] [-stream] [-archive NAME] [-outbox]",
		"       onceq create-table -store postgres [-table NAME] [-postgres-url URL]",
		"       onceq create-table -store redis [-redis-addr HOST:PORT|URL] [-redis-prefix onceq:]",
		"Creates the idempotency table (on-demand billing, TTL on expires_at) and waits until it is ACTIVE.",
		"An existing table with the same key schema is accepted; TTL is enabled on it if it is not.",
		"Endpoint, region and credentials come from the AWS SDK's standard settings (AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL_DYNAMODB).",
		"With -outbox: also creates the outbox table NAME"+"_outbox, where outgoing messages commit with COMPLETED.",
		"With -store postgres: creates the records table (default "+dedup.DefaultTable+"), its expiry index and its outbox table if missing,",
		"and upgrades a table of an earlier version. With -store redis there is no table: it checks that the server answers",
		"and runs the store's scripts, and says where the records will live.",
	)
	sf := addStoreFlags(fs)
	fs.StringVar(&sf.postgresURL, "url", "", "the same as -postgres-url (its earlier name)")
	table := fs.String("table", "", "table name (required)")
	tenant := fs.Bool("tenant-layout", false, "partition key = the tenant (the key before its first '#'), sort key = the rest")
	stream := fs.Bool("stream", false, "enable the table's stream (NEW_AND_OLD_IMAGES), which 'onceq audit' reads")
	archive := fs.String("archive", "", "also create this archive table for the audit trail's tombstones (same layout, TTL on expires_at)")
	withOutbox := fs.Bool("outbox", false, "also create the outbox table (NAME_outbox), where handlers' outgoing messages commit")
	if err := fs.Parse(args); err != nil {
		return usageExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "onceq create-table: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if p := sf.problem(fs); p != "" {
		fmt.Fprintf(stderr, "onceq create-table: %s\n", p)
		return 2
	}
	switch {
	case sf.store != storeDynamo && (*tenant || *stream || *archive != "" || *withOutbox):
		fmt.Fprintln(stderr, "onceq create-table: -tenant-layout, -stream, -archive and -outbox are DynamoDB's (PostgreSQL's outbox table is always made)")
		return 2
	case sf.store == storeRedis && *table != "":
		fmt.Fprintln(stderr, "onceq create-table: Redis has no table: its records are keys under -redis-prefix")
		return 2
	case sf.store == storePostgres:
		return createPostgresTable(ctx, sf, *table, stdout, stderr)
	case sf.store == storeRedis:
		return createRedisTable(ctx, sf, stdout, stderr)
	}
	if *table == "" {
		fmt.Fprintln(stderr, "onceq create-table: -table is required")
		return 2
	}
	client, err := dynamoClient(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "onceq create-table: %s\n", field(err.Error()))
		return 1
	}
	var opts []dynamostore.TableOption
	if *tenant {
		opts = append(opts, dynamostore.TenantLayout())
	}
	if *archive != "" {
		if *archive == *table {
			fmt.Fprintln(stderr, "onceq create-table: -archive must name another table")
			return 2
		}
		if err := dynamostore.CreateTable(ctx, client, *archive, opts...); err != nil {
			fmt.Fprintf(stderr, "onceq create-table: %s\n", field(err.Error()))
			return 1
		}
		fmt.Fprintf(stdout, "archive table %s is ACTIVE\n", field(*archive))
	}
	if *stream {
		opts = append(opts, dynamostore.WithStream())
	}
	if *withOutbox {
		opts = append(opts, dynamostore.WithOutbox())
	}
	if err := dynamostore.CreateTable(ctx, client, *table, opts...); err != nil {
		fmt.Fprintf(stderr, "onceq create-table: %s\n", field(err.Error()))
		return 1
	}
	layout := "key layout"
	if *tenant {
		layout = "tenant layout"
	}
	if *stream {
		layout += ", stream NEW_AND_OLD_IMAGES"
	}
	fmt.Fprintf(stdout, "table %s is ACTIVE (%s, on-demand, TTL on expires_at)\n", field(*table), layout)
	if *withOutbox {
		fmt.Fprintf(stdout, "outbox table %s is ACTIVE\n", field(dynamostore.OutboxTable(*table)))
	}
	return 0
}
