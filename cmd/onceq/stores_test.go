package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// A refused connection must come back well within the connect timeout
// (10 s): it is an answer, not a wait.
const refusalBound = 5 * time.Second

func secret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "pw-" + hex.EncodeToString(b)
}

// pgTable creates a records table with create-table's layout, dropped
// after the test, and returns the connection that made it.
func pgTable(t *testing.T, url string) (*pgx.Conn, string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	table := tableName(t)
	if err := pgstore.CreateTable(t.Context(), conn, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	return conn, table
}

// check -store postgres passes on create-table's table, and names what is
// wrong with a missing or hand-made one.
func TestCheckPostgres(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	conn, table := pgTable(t, pgURL)
	u, _ := url.Parse(pgURL)
	server := "PostgreSQL at " + u.Host + ", database " + strings.TrimPrefix(u.Path, "/") + ", user " + u.User.Username()

	code, out, errOut := onceq("check", "-store", "postgres", "-postgres-url", pgURL, "-table", table)
	if code != 0 || !strings.Contains(out, "ok   "+server+": connected (server ") ||
		!strings.Contains(out, "ok   table "+table+": exists as public."+table+", the layout of create-table, SELECT, INSERT and UPDATE granted") {
		t.Fatalf("create-table's table: exit %d, out %q, err %q", code, out, errOut)
	}

	// The connection from the environment, as servers.sh writes it.
	t.Setenv(postgresURLEnv, pgURL)
	absent := tableName(t)
	code, out, _ = onceq("check", "-store", "postgres", "-table", absent)
	if code != 1 || !strings.Contains(out, "FAIL table "+absent+": does not exist: create it with `onceq create-table -store postgres -table "+absent+"`") {
		t.Fatalf("absent table: exit %d, out %q", code, out)
	}

	handMade := tableName(t)
	if _, err := conn.Exec(t.Context(), "CREATE TABLE "+handMade+` (id text PRIMARY KEY, status text, version bigint, owner text,
		payload_hash text, response bytea, attempts integer, last_error text, created_at timestamptz, expires_at timestamptz, takeovers integer)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+handMade) })
	code, out, _ = onceq("check", "-store", "postgres", "-table", handMade)
	if code != 1 || !strings.Contains(out, "FAIL table "+handMade+": not the layout create-table makes: column id is text, want bytea") {
		t.Fatalf("hand-made table: exit %d, out %q", code, out)
	}
	// A record long expired and not deleted: no Cleanup runs.
	long := time.Now().Add(-3 * time.Hour)
	if _, err := mustPostgres(t, conn, table).Claim(t.Context(), dedup.ClaimRequest{Key: "onceq#old", Owner: "w", PayloadHash: "h", Now: long, LeaseUntil: long.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	code, out, _ = onceq("check", "-store", "postgres", "-table", table)
	if code != 0 || !strings.Contains(out, "WARN table "+table+": 1 row expired over an hour ago: no pgstore Cleanup (or DeleteExpired job) deletes them") {
		t.Fatalf("a row long expired: exit %d, out %q", code, out)
	}
	if _, err := conn.Exec(t.Context(), "DROP INDEX "+table+"_expires_at_idx"); err != nil {
		t.Fatal(err)
	}
	code, out, _ = onceq("check", "-store", "postgres", "-table", table)
	if code != 0 || !strings.Contains(out, "WARN table "+table+": no index on expires_at") {
		t.Fatalf("no expiry index: exit %d, out %q", code, out)
	}
}

// A refused login fails at once and names the server, database and user,
// never the password: a role the real server does not know, and a server
// that asks for the password and refuses it.
func TestCheckPostgresRefusedLogin(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	u, _ := url.Parse(pgURL)
	pw := secret(t)
	user := "onceq_nobody_" + hex.EncodeToString([]byte(pw[3:7]))
	bad := *u
	bad.User = url.UserPassword(user, pw)

	start := time.Now()
	code, out, errOut := onceq("check", "-store", "postgres", "-postgres-url", bad.String())
	took := time.Since(start)
	want := "FAIL PostgreSQL at " + u.Host + ", database " + strings.TrimPrefix(u.Path, "/") + ", user " + user + ": cannot connect: role \"" + user + "\" does not exist (SQLSTATE 28000): check the user and password"
	if code != 1 || !strings.Contains(out, want) || strings.Contains(out+errOut, pw) || took > refusalBound {
		t.Fatalf("unknown role: exit %d after %v, out %q, err %q; want exit 1 within %v, %q, no password", code, took, out, errOut, refusalBound, want)
	}

	// The test server trusts every local login, so this one asks for the
	// password as a server with password authentication does.
	addr, sent := refusingServer(t)
	start = time.Now()
	code, out, errOut = onceq("check", "-store", "postgres", "-postgres-url", "postgres://app:"+pw+"@"+addr+"/orders?sslmode=disable")
	took = time.Since(start)
	want = "FAIL PostgreSQL at " + addr + ", database orders, user app: cannot connect: password authentication failed for user \"app\" (SQLSTATE 28P01): check the user and password"
	if code != 1 || !strings.Contains(out, want) || strings.Contains(out+errOut, pw) || took > refusalBound {
		t.Fatalf("wrong password: exit %d after %v, out %q, err %q; want exit 1 within %v, %q, no password", code, took, out, errOut, refusalBound, want)
	}
	if got := <-sent; got != pw {
		t.Fatalf("the server got password %q, want the URL's: the refusal tested is not of the password", got)
	}

	// No server at all: refused at once, named.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	start = time.Now()
	code, out, _ = onceq("check", "-store", "postgres", "-postgres-url", "postgres://app:"+pw+"@"+closed+"/orders?sslmode=disable")
	took = time.Since(start)
	if code != 1 || !strings.Contains(out, "FAIL PostgreSQL at "+closed+", database orders, user app: cannot connect: ") ||
		!strings.Contains(out, "connection refused") || strings.Contains(out, pw) || took > refusalBound {
		t.Fatalf("unreachable: exit %d after %v, out %q", code, took, out)
	}

	// A connection string that does not parse is not repeated.
	code, _, errOut = onceq("inspect", "-store", "postgres", "-postgres-url", "postgres://app:"+pw+"@host:notaport/db", "k")
	if code != 1 || !strings.Contains(errOut, "does not parse") || strings.Contains(errOut, pw) {
		t.Fatalf("unparsable URL: exit %d, err %q", code, errOut)
	}
}

// refusingServer is a PostgreSQL server for one connection that asks for
// a cleartext password and refuses it; sent gets the password the client
// sent. The test owns its goroutine, which ends with the connection.
func refusingServer(t *testing.T) (addr string, sent <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(got)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		be := pgproto3.NewBackend(conn, conn)
		if _, err := be.ReceiveStartupMessage(); err != nil {
			return
		}
		be.Send(&pgproto3.AuthenticationCleartextPassword{})
		if be.Flush() != nil || be.SetAuthType(pgproto3.AuthTypeCleartextPassword) != nil {
			return
		}
		msg, err := be.Receive()
		if err != nil {
			return
		}
		if p, ok := msg.(*pgproto3.PasswordMessage); ok {
			got <- p.Password
		}
		be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01", Message: `password authentication failed for user "app"`})
		_ = be.Flush()
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String(), got
}

// inspect -store postgres shows a record by KEY, by a tenant's KEY and by
// key_hash, in the DynamoDB inspect's shape.
func TestInspectPostgres(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	conn, table := pgTable(t, pgURL)
	store := mustPostgres(t, conn, table)
	key := mustKey(t, "orders", "order-42")
	complete(t, store, key, `{"charged":true}`)
	tenantKey, _ := dedup.TenantKey("acme", mustKey(t, "onceq", "order-7"))
	complete(t, store, tenantKey, "ok")

	base := []string{"inspect", "-store", "postgres", "-postgres-url", pgURL, "-table", table}
	code, out, errOut := onceq(append(base, "-namespace", "orders", "order-42")...)
	if code != 0 || !strings.Contains(out, "key:        orders#order-42\nstatus:     COMPLETED\nversion:    2\n") ||
		!strings.Contains(out, "response:   16 bytes (print them with -response)") {
		t.Fatalf("by KEY: exit %d, out %q, err %q", code, out, errOut)
	}
	h := dedup.KeyHash(key)
	code, out, errOut = onceq(append(base, "-key-hash", h)...)
	if code != 0 || !strings.Contains(out, "key:        orders#order-42\n") ||
		!strings.Contains(errOut, "key_hash "+h+": a record in table "+table+", found by reading 2 rows") {
		t.Fatalf("by key_hash: exit %d, out %q, err %q", code, out, errOut)
	}
	code, out, _ = onceq(append(base, "-response", "-key-hash", h)...)
	if code != 0 || out != `{"charged":true}` {
		t.Fatalf("-response: exit %d, out %q", code, out)
	}
	code, out, errOut = onceq(append(base, "-tenant", "acme", "order-7")...)
	if code != 0 || !strings.Contains(out, "key:        acme#!#onceq#order-7\n") {
		t.Fatalf("by tenant and KEY: exit %d, out %q, err %q", code, out, errOut)
	}
	code, out, errOut = onceq(append(base, "order-43")...)
	if code != 1 || out != "" || !strings.Contains(errOut, `no record for stored key "onceq#order-43" in table `+table) {
		t.Fatalf("absent KEY: exit %d, out %q, err %q", code, out, errOut)
	}
	absent := dedup.KeyHash("onceq#absent")
	code, _, errOut = onceq(append(base, "-key-hash", absent)...)
	if code != 1 || !strings.Contains(errOut, "no record with key_hash "+absent+" in table "+table+": read all 2 rows") || strings.Contains(errOut, "order-42") {
		t.Fatalf("absent key_hash: exit %d, err %q", code, errOut)
	}
	code, _, errOut = onceq(append(base, "-key-hash", absent, "-scan-limit", "1")...)
	if code != 1 || !strings.Contains(errOut, "key_hash "+absent+" not found within 1 row of table "+table+" (-scan-limit 1)") {
		t.Fatalf("scan limit: exit %d, err %q", code, errOut)
	}
}

// inspect -store redis shows a record by KEY and by key_hash; Redis keeps
// no key, so a record found by its hash is printed without one.
func TestInspectRedis(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := "onceqcli:" + tableName(t) + ":"
	c := redisUnder(t, addr, prefix)
	store, err := redisstore.New(c, redisstore.Prefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	key := mustKey(t, "onceq", "order-42")
	complete(t, store, key, "charged")

	base := []string{"inspect", "-store", "redis", "-redis-addr", addr, "-redis-prefix", prefix}
	code, out, errOut := onceq(append(base, "order-42")...)
	if code != 0 || !strings.Contains(out, "key:        onceq#order-42\nstatus:     COMPLETED\n") {
		t.Fatalf("by KEY: exit %d, out %q, err %q", code, out, errOut)
	}
	h := dedup.KeyHash(key)
	code, out, errOut = onceq(append(base, "-key-hash", h)...)
	if code != 0 || !strings.Contains(out, "key:        (not stored: the Redis key holds its SHA-256, key_hash "+h+")\nstatus:     COMPLETED\n") ||
		!strings.Contains(errOut, "key_hash "+h+": a record in prefix \""+prefix+"\" of Redis at "+addr+", database 0, user default, found by reading 1 key") ||
		strings.Contains(out+errOut, "order-42") {
		t.Fatalf("by key_hash: exit %d, out %q, err %q", code, out, errOut)
	}
	code, out, _ = onceq(append(base, "-response", "-key-hash", h)...)
	if code != 0 || out != "charged" {
		t.Fatalf("-response: exit %d, out %q", code, out)
	}
	code, _, errOut = onceq(append(base, "order-43")...)
	if code != 1 || !strings.Contains(errOut, `no record for stored key "onceq#order-43" in prefix "`+prefix+`"`) {
		t.Fatalf("absent KEY: exit %d, err %q", code, errOut)
	}
	absent := dedup.KeyHash("onceq#absent")
	code, _, errOut = onceq(append(base, "-key-hash", absent)...)
	if code != 1 || !strings.Contains(errOut, "no record with key_hash "+absent+" in prefix \""+prefix+"\"") {
		t.Fatalf("absent key_hash: exit %d, err %q", code, errOut)
	}
}

// check -store redis passes on records, fails on other data under the
// prefix, and a refused or unreachable server fails at once naming it,
// never the password.
func TestCheckRedis(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := "onceqcli:" + tableName(t) + ":"
	c := redisUnder(t, addr, prefix)
	store, err := redisstore.New(c, redisstore.Prefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	complete(t, store, mustKey(t, "onceq", "order-42"), "charged")

	t.Setenv(redisAddrEnv, addr)
	server := "Redis at " + addr + ", database 0, user default"
	code, out, errOut := onceq("check", "-store", "redis", "-redis-prefix", prefix)
	if code != 0 || !strings.Contains(out, "ok   "+server+": connected (server ") ||
		!strings.Contains(out, "ok   prefix \""+prefix+"\": 1 keys read, all records this version reads: 1 of layout 1") {
		t.Fatalf("records: exit %d, out %q, err %q", code, out, errOut)
	}
	if err := c.HSet(t.Context(), prefix+"{other}", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	code, out, _ = onceq("check", "-store", "redis", "-redis-prefix", prefix)
	if code != 1 || !strings.Contains(out, "FAIL prefix \""+prefix+"\": 1 of 2 keys read hold no record this version reads ("+prefix+"{other}, for one)") {
		t.Fatalf("other data under the prefix: exit %d, out %q", code, out)
	}

	pw := secret(t)
	start := time.Now()
	code, out, errOut = onceq("check", "-store", "redis", "-redis-addr", "redis://nobody:"+pw+"@"+addr)
	took := time.Since(start)
	if code != 1 || !strings.Contains(out, "FAIL Redis at "+addr+", database 0, user nobody: cannot connect: ") ||
		!strings.Contains(out, "WRONGPASS") || strings.Contains(out+errOut, pw) || took > refusalBound {
		t.Fatalf("wrong password: exit %d after %v, out %q, err %q", code, took, out, errOut)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	start = time.Now()
	code, out, _ = onceq("check", "-store", "redis", "-redis-addr", closed)
	took = time.Since(start)
	if code != 1 || !strings.Contains(out, "FAIL Redis at "+closed+", database 0, user default: cannot connect: ") ||
		!strings.Contains(out, "connection refused") || took > refusalBound {
		t.Fatalf("unreachable: exit %d after %v, out %q", code, took, out)
	}

	code, out, _ = onceq("create-table", "-store", "redis", "-redis-prefix", prefix)
	if code != 0 || !strings.Contains(out, server+" needs no table: each record is a string key "+prefix+"{<SHA-256 of its key>}") {
		t.Fatalf("create-table: exit %d, out %q", code, out)
	}
}

func TestStoreUsage(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "-store", "mysql", "k"}, `-store "mysql": want dynamodb, postgres or redis`},
		{[]string{"inspect", "-table", "t", "-postgres-url", "u", "k"}, "-postgres-url goes with -store postgres"},
		{[]string{"inspect", "-table", "t", "-redis-addr", "a", "k"}, "-redis-addr and -redis-prefix go with -store redis"},
		{[]string{"inspect", "-table", "t", "-connect-timeout", "1s", "k"}, "-connect-timeout goes with -store postgres or redis"},
		{[]string{"inspect", "-store", "postgres", "-tenant", "acme"}, "DynamoDB's"},
		{[]string{"inspect", "-store", "postgres", "-tenant-layout", "k"}, "DynamoDB's"},
		{[]string{"inspect", "-store", "redis", "-table", "t", "k"}, "Redis has no table"},
		{[]string{"inspect", "-store", "redis"}, "exactly one KEY"},
		{[]string{"check", "-store", "postgres", "-table", "t", "-regions", "us-east-1"}, "DynamoDB's"},
		{[]string{"check", "-store", "postgres", "-tenant-layout"}, "DynamoDB's"},
		{[]string{"check", "-store", "postgres", "-connect-timeout", "0s"}, "-connect-timeout 0s"},
		{[]string{"check", "-store", "redis", "-table", "t"}, "Redis has no table"},
		{[]string{"create-table", "-store", "postgres", "-stream"}, "DynamoDB's"},
		{[]string{"create-table", "-store", "redis", "-table", "t"}, "Redis has no table"},
		{[]string{"capacity", "-store", "mysql", "-rps", "1"}, `-store "mysql"`},
		{[]string{"capacity", "-store", "redis", "-rps", "1", "-archive-retention", "1h"}, "DynamoDB's"},
	}
	for _, c := range cases {
		code, _, errOut := onceq(c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("onceq %v: exit %d, err %q; want exit 2 containing %q", c.args, code, errOut, c.want)
		}
	}
	code, out, _ := onceq("help")
	for _, s := range []string{"dynamodb", "postgres", "redis"} {
		if code != 0 || !strings.Contains(out, s) {
			t.Errorf("help: exit %d, out %q: want the stores named, %q among them", code, out, s)
		}
	}
}

// capacity -store postgres and redis budget what bounds those stores:
// statements and commits, rows; commands and memory.
func TestCapacityStores(t *testing.T) {
	code, out, _ := onceq("capacity", "-store", "postgres", "-rps", "2000", "-dup", "0.15")
	// Unique: INSERT + UPDATE, two commits; a duplicate: two statements, no write.
	for _, want := range []string{"statements/s  commits/s", "claim + complete                           4600       4000",
		"claim + transaction (2 items)              6600       4000", "one round trip (2 items)                   4600       2000",
		"174120000 rows", "dead rows for autovacuum: 4000/s"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("postgres: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	code, out, _ = onceq("capacity", "-store", "redis", "-rps", "2000", "-dup", "0.15", "-retention", "1h")
	for _, want := range []string{"claim + complete                           4600", "one round trip (no business writes)         2600",
		"8400000 keys", "3.80 GB", "noeviction"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("redis: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
}

// redisUnder is a client of the test server that deletes the keys under
// prefix after the test.
func redisUnder(t *testing.T, addr, prefix string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		_ = c.Close()
	})
	return c
}

func mustPostgres(t *testing.T, conn *pgx.Conn, table string) *pgstore.Store {
	t.Helper()
	s, err := openPostgres(conn, table)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustKey(t *testing.T, ns, key string) string {
	t.Helper()
	k, err := dedup.Key(ns, key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// complete claims key and completes it with response, as a worker does.
func complete(t *testing.T, s dedup.Store, key, response string) {
	t.Helper()
	now := time.Now()
	c, err := s.Claim(t.Context(), dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: "worker-1", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !c.Acquired {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	if err := s.Complete(t.Context(), dedup.CompleteRequest{Lease: c.Lease, Response: []byte(response), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
}
