package main

import (
	"context"
	"fmt"
	"github.com/onceq/onceq/cmd/onceq/internal/redrive"
	"io"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
)

// inspectAt is where inspect reads: the table, and for DynamoDB how it
// keys its records (-tenant-layout, -shards) and whether it is listed by
// tenant.
type inspectAt struct {
	table           string
	tenant, listing bool
	shards          int
}

// inspected is a store opened for inspect. Every lookup goes through the
// dedup.Inspector the store hands over in its Capabilities, so the stores
// differ only in how they are opened and in the words that name what they
// hold.
type inspected struct {
	dedup.Inspector
	caps     dedup.Capabilities // the store's, which gave the Inspector
	where    string             // where the records live: "table t", "prefix ... of Redis at ..."
	notFound string             // a line more when a key has no record ("": none)
	noKey    string             // why a record comes without its key
	listCost string             // what a listing by tenant read, as " (...)"
	close    func()
}

// openInspector opens the store the flags name: the one place inspect
// tells the stores apart.
func openInspector(ctx context.Context, sf *storeFlags, at inspectAt) (*inspected, error) {
	switch sf.store {
	case storePostgres:
		if at.table == "" {
			at.table = dedup.DefaultTable
		}
		conn, _, err := sf.connectPostgres(ctx)
		if err != nil {
			return nil, err
		}
		store, err := openPostgres(conn, at.table)
		if err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, err
		}
		return &inspected{Inspector: store.Capabilities().Inspector, caps: store.Capabilities(), where: "table " + at.table, noKey: "the table holds its SHA-256",
			close: func() { _ = conn.Close(context.WithoutCancel(ctx)) }}, nil
	case storeRedis:
		c, store, server, err := openRedis(ctx, sf)
		if err != nil {
			return nil, err
		}
		return &inspected{Inspector: store.Capabilities().Inspector, caps: store.Capabilities(), where: fmt.Sprintf("prefix %q of %s", sf.redisPrefix, server),
			noKey: "the Redis key holds its SHA-256", close: func() { _ = c.Close() }}, nil
	}
	client, err := dynamoClient(ctx)
	if err != nil {
		return nil, err
	}
	var opts []dynamostore.Option
	if at.shards > 1 || at.listing {
		// Where the record lives: its partition key's shard.
		opts = append(opts, dynamostore.TenantLayout(), dynamostore.TenantShards(at.shards))
	}
	store, err := openStore(client, at.table, at.tenant, opts...)
	if err != nil {
		return nil, err
	}
	if at.listing {
		// A Query of a default-layout table by "tenant" reads the one
		// record whose whole key is the tenant: none, said as "0 records".
		if err := tenantTable(ctx, client, at.table); err != nil {
			return nil, fmt.Errorf("-tenant: %w", err)
		}
	}
	ins := &inspected{Inspector: store.Capabilities().Inspector, caps: store.Capabilities(), where: "table " + at.table, noKey: "the table holds its SHA-256",
		listCost: fmt.Sprintf(" (a Query of %d partition keys)", at.shards), close: func() {}}
	if at.tenant && at.shards == 1 {
		ins.notFound = "onceq inspect: a store with TenantShards(n) keeps a tenant's record on partition key <tenant>#<shard>: give -shards n (or find it with -key-hash)"
	}
	return ins, nil
}

// printSearch tells the operator what a -key-hash search read and found;
// a non-zero code ends the command.
func (ins *inspected) printSearch(stderr io.Writer, res dedup.KeyHashSearch, hash string, limit int) int {
	read := plural(res.Scanned, res.Unit)
	cost := units(res.ReadUnits) + " read units"
	if n := len(res.Records); n > 0 {
		found := "a record"
		if n > 1 {
			found = fmt.Sprintf("%d records", n)
		}
		if res.Metered {
			fmt.Fprintf(stderr, "key_hash %s: %s in %s, found by scanning %s (%s, the record's read included)\n", hash, found, ins.where, read, cost)
		} else {
			fmt.Fprintf(stderr, "key_hash %s: %s in %s, found by reading %s\n", hash, found, ins.where, read)
		}
		return 0
	}
	switch {
	case res.Exhausted && res.Metered:
		fmt.Fprintf(stderr, "onceq inspect: no record with key_hash %s in %s: scanned all %s (%s)\n", hash, ins.where, read, cost)
	case res.Exhausted:
		fmt.Fprintf(stderr, "onceq inspect: no record with key_hash %s in %s: read all %s\n", hash, ins.where, read)
	case res.Metered:
		fmt.Fprintf(stderr, "onceq inspect: key_hash %s not found within %s of %s (-scan-limit %d; %s), which may hold more: raise -scan-limit to read further, at a cost in read capacity for every item read\n",
			hash, read, ins.where, limit, cost)
	default:
		fmt.Fprintf(stderr, "onceq inspect: key_hash %s not found within %s of %s (-scan-limit %d), which may hold more: raise -scan-limit to read further\n",
			hash, read, ins.where, limit)
	}
	if res.Unmatchable > 0 {
		fmt.Fprintf(stderr, "onceq inspect: %d of the %ss read store their key as a hash (%s), which -key-hash cannot match; look those up by KEY\n",
			res.Unmatchable, res.Unit, res.HashedKeys)
	}
	return 1
}

// printRecords prints recs, or with response the one record's response.
func printRecords(stdout, stderr io.Writer, response, raw bool, recs []dedup.Record) int {
	if response {
		if len(recs) > 1 {
			fmt.Fprintf(stderr, "onceq inspect: -response: %d records match; their responses would run together\n", len(recs))
			return 1
		}
		printResponse(stdout, stderr, recs[0], raw)
		return 0
	}
	now := time.Now()
	for i, r := range recs {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printRecord(stdout, r, now)
	}
	return 0
}

// records is what onceq redrive needs of the store: its records, and the
// reset its Capabilities hand over.
func (ins *inspected) records() redrive.Records {
	return struct {
		dedup.Inspector
		dedup.Resetter
	}{ins.Inspector, ins.caps.Resetter}
}
