package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"time"
)

// storeRate is the rate of one mode on PostgreSQL or Redis: requests
// (SQL statements or Redis commands) and, on PostgreSQL, the commits that
// write, each a WAL flush.
type storeRate struct {
	Name              string
	Requests, Commits float64
}

// pgCleanupLag is how long a record outlives its expiry in PostgreSQL:
// pgstore's Cleanup keeps it Grace (10 minutes) and sweeps every minute.
const pgCleanupLag = 11 * time.Minute

// pgRowOverhead is a row's tuple header and line pointer; pgIndexBytes the
// two index entries of a row (id, assumed 64 B of key, and expires_at).
const (
	pgRowOverhead = 28
	pgIndexBytes  = 64 + 16 + 8 + 16
)

// planPostgres is the statements and writing commits per second of each
// mode at peak unique messages per second, dup duplicates per unique and
// txn items per transaction (the record included). A duplicate costs two
// statements that write nothing: the INSERT that meets the record and the
// statement that reads it.
func planPostgres(peak, dup float64, txn int) []storeRate {
	d := peak * dup
	n := float64(txn)
	return []storeRate{
		{"claim + complete", peak*2 + d*2, peak * 2},
		{fmt.Sprintf("claim + transaction (%d items)", txn), peak*(1+n) + d*2, peak * 2},
		{fmt.Sprintf("one round trip (%d items)", txn), peak*n + d*2, peak},
	}
}

// planRedis is the commands per second of each mode. A duplicate costs
// the SET NX that meets the record and the GET that reads it.
func planRedis(peak, dup float64) []storeRate {
	d := peak * dup
	return []storeRate{
		{"claim + complete", peak*2 + d*2, 0},
		{"one round trip (no business writes)", peak + d*2, 0},
	}
}

// redisKeyOverhead is what Redis spends on a key beside its name and
// value: dictionary and expiry entries, object and string headers.
const redisKeyOverhead = 80

// redisKeyName is the length of a record's Redis key with the default
// prefix: "onceq:" and the key's SHA-256 in braces.
const redisKeyName = len("onceq:") + 66

// redisGrace is redisstore's default Grace: a record is kept this long
// past its expiry.
const redisGrace = 10 * time.Minute

func printStoreCapacity(w io.Writer, store string, peak, dup float64, txn int, retention time.Duration, itemBytes int, rate float64) {
	fmt.Fprintf(w, "peak %.0f unique msg/s, %.0f%% duplicates (%.0f deliveries/s)\n", peak, dup*100, peak*(1+dup))
	if store == storePostgres {
		fmt.Fprintf(w, "%-34s %12s %10s\n", "mode", "statements/s", "commits/s")
		for _, r := range planPostgres(peak, dup, txn) {
			fmt.Fprintf(w, "%-34s %12.0f %10.0f\n", r.Name, math.Ceil(r.Requests), math.Ceil(r.Commits))
		}
		fmt.Fprintln(w, "PostgreSQL has no write units: what bounds it is writing commits, each a WAL flush (synchronous_commit),")
		fmt.Fprintln(w, "and the connections (the pool's size caps concurrent claims). A duplicate writes nothing; answered by")
		fmt.Fprintln(w, "the consumer's COMPLETED cache it costs nothing.")
		rows := rate * (retention + pgCleanupLag).Seconds()
		fmt.Fprintf(w, "\nstorage at %.0f unique msg/s, kept for retention + 11m (Cleanup's Grace 10m, a sweep a minute):\n", rate)
		fmt.Fprintf(w, "%-34s %14.0f rows %10.2f GB\n", fmt.Sprintf("table (%v + 11m, %d B/row)", retention, itemBytes), rows, rows*float64(itemBytes+pgRowOverhead)/1e9)
		fmt.Fprintf(w, "%-34s %14s      %10.2f GB\n", "indexes (id, expires_at)", "", rows*pgIndexBytes/1e9)
		fmt.Fprintf(w, "dead rows for autovacuum: %.0f/s (a completion's UPDATE and Cleanup's DELETE each leave one)\n", math.Ceil(rate*2))
		fmt.Fprintln(w, "Each row counts 28 B of tuple header; the id index assumes keys of 64 B. Without Cleanup running nothing is deleted.")
		return
	}
	fmt.Fprintf(w, "%-34s %12s\n", "mode", "commands/s")
	for _, r := range planRedis(peak, dup) {
		fmt.Fprintf(w, "%-34s %12.0f\n", r.Name, math.Ceil(r.Requests))
	}
	fmt.Fprintln(w, "Redis has no write units: one core runs every command of a server (or shard), on the order of")
	fmt.Fprintln(w, "100,000 GETs and SETs a second, fewer scripts (each completion is one). Redis takes no business writes:")
	fmt.Fprintln(w, "-txn-items does not apply. A duplicate answered by the consumer's COMPLETED cache costs nothing.")
	keys := rate * (retention + redisGrace).Seconds()
	fmt.Fprintf(w, "\nmemory at %.0f unique msg/s, kept for retention + 10m (the store's Grace):\n", rate)
	fmt.Fprintf(w, "%-34s %14.0f keys %10.2f GB\n", fmt.Sprintf("records (%v + 10m, %d B/value)", retention, itemBytes), keys, keys*float64(redisKeyName+itemBytes+redisKeyOverhead)/1e9)
	fmt.Fprintln(w, "Each key counts its name (72 B with the default prefix) and 80 B of Redis overhead. Set maxmemory above it,")
	fmt.Fprintln(w, "with room for the copy-on-write of a snapshot or AOF rewrite, and maxmemory-policy noeviction: an evicted")
	fmt.Fprintln(w, "record is a key processed again.")
}

// setFlags are the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}
