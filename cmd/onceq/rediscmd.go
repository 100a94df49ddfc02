package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/redisstore"
)

// redisSample bounds how many keys check reads under the prefix to tell
// records from other data.
const redisSample = 1000

// openRedis connects to the server the flags name and runs the store's
// own Check (the server answers this user, who may run its scripts).
func openRedis(ctx context.Context, sf *storeFlags) (*redis.Client, *redisstore.Store, string, error) {
	c, server, err := sf.redisClient()
	if err != nil {
		return nil, nil, server, err
	}
	store, err := redisstore.New(c, redisstore.Prefix(sf.redisPrefix))
	if err != nil {
		_ = c.Close()
		return nil, nil, server, err
	}
	ctx, cancel := context.WithTimeout(ctx, sf.timeout)
	defer cancel()
	if err := store.Check(ctx); err != nil {
		_ = c.Close()
		return nil, nil, server, &serverError{server: server, err: redisReason(err)}
	}
	return c, store, server, nil
}

// redisReason is why Redis refused, with what to do about a refused
// login. Redis's replies never repeat a password.
func redisReason(err error) error {
	text := err.Error()
	if strings.Contains(text, "WRONGPASS") || strings.Contains(text, "NOAUTH") {
		return fmt.Errorf("%w: check the user and password (in the URL or $%s)", err, redisPasswordEnv)
	}
	return err
}

// createRedisTable has nothing to create: it checks the server, and says
// where the records will live.
func createRedisTable(ctx context.Context, sf *storeFlags, stdout, stderr io.Writer) int {
	c, _, server, err := openRedis(ctx, sf)
	if err != nil {
		fmt.Fprintf(stderr, "onceq create-table: %s\n", field(err.Error()))
		return 1
	}
	defer c.Close()
	fmt.Fprintf(stdout, "%s needs no table: each record is a string key %s{<SHA-256 of its key>} that Redis expires; reachable, scripts loaded\n",
		server, sf.redisPrefix)
	return 0
}

// checkRedis checks what a worker needs of Redis: the server answers this
// user, who may run the store's scripts; Redis keeps what it is given
// (no eviction, persistence on); the keys under the prefix are records
// this version reads.
func checkRedis(ctx context.Context, r *checkReport, sf *storeFlags) {
	c, store, server, err := openRedis(ctx, sf)
	if err != nil {
		r.fail(server, "%s", errText(err, server))
		return
	}
	defer c.Close()
	version := "?"
	if info, err := c.InfoMap(ctx, "server").Result(); err == nil {
		version = info["Server"]["redis_version"]
	}
	r.ok(server, "connected (server %s), the store's scripts loaded", version)

	// A record evicted is a key processed again; a record lost on restart
	// too. CONFIG is often refused on managed services: then say what to
	// look at.
	if cfg, err := c.ConfigGet(ctx, "maxmemory*").Result(); err != nil {
		r.warn(server, "cannot read maxmemory-policy (%v): make sure it is noeviction, or that maxmemory is 0", err)
	} else if p := cfg["maxmemory-policy"]; p != "noeviction" && cfg["maxmemory"] != "0" {
		r.warn(server, "maxmemory-policy %s with maxmemory %s: under memory pressure Redis evicts records (every onceq record has an expiry), and an evicted key is processed again; set maxmemory-policy noeviction",
			p, cfg["maxmemory"])
	} else {
		r.ok(server, "evicts no record (maxmemory %s, maxmemory-policy %s)", cfg["maxmemory"], p)
	}
	if cfg, err := c.ConfigGet(ctx, "appendonly").Result(); err == nil && cfg["appendonly"] != "yes" {
		r.warn(server, "appendonly no: a restart loses the records written since the last snapshot, and their keys are processed again; set appendonly yes (appendfsync always narrows it to none)")
	}

	subject := fmt.Sprintf("prefix %q", sf.redisPrefix)
	sample, err := store.CheckRecords(ctx, redisSample)
	if err != nil {
		r.fail(subject, "%v", err)
		return
	}
	if sample.Foreign > 0 {
		r.fail(subject, "%d of %d keys read hold no record this version reads (%s, for one): another program shares the prefix, or a newer onceq wrote them; give each its own prefix",
			sample.Foreign, sample.Scanned, sample.FirstForeign)
		return
	}
	var layouts []string
	for _, l := range slices.Sorted(maps.Keys(sample.Layouts)) {
		layouts = append(layouts, fmt.Sprintf("%d of layout %c", sample.Layouts[l], l))
	}
	if len(layouts) == 0 {
		layouts = []string{"none yet"}
	}
	r.ok(subject, "%d keys read, all records this version reads: %s", sample.Scanned, strings.Join(layouts, ", "))
}
