package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
)

// The stores a command can work on (-store).
const (
	storeDynamo   = "dynamodb"
	storePostgres = "postgres"
	storeRedis    = "redis"
)

// The environment variables integration/servers.sh writes, read when the
// connection flags are not given.
const (
	postgresURLEnv = "ONCEQ_POSTGRES_URL"
	redisAddrEnv   = "ONCEQ_REDIS_ADDR"
	// redisPasswordEnv is redis-cli's own password variable.
	redisPasswordEnv = "REDISCLI_AUTH"
)

// storeFlags choose the store and how to reach it.
type storeFlags struct {
	store       string
	postgresURL string
	redisAddr   string
	redisPrefix string
	timeout     time.Duration
}

// addStoreFlags adds -store and the connection flags of PostgreSQL and
// Redis (DynamoDB's come from the AWS SDK's settings).
func addStoreFlags(fs *flag.FlagSet) *storeFlags {
	f := &storeFlags{}
	fs.StringVar(&f.store, "store", storeDynamo, "the dedup store: dynamodb, postgres or redis")
	fs.StringVar(&f.postgresURL, "postgres-url", "",
		"-store postgres: connection URL or key=value string (default $"+postgresURLEnv+", else PostgreSQL's PGHOST, PGUSER, PGPASSWORD, ... and ~/.pgpass)")
	fs.StringVar(&f.redisAddr, "redis-addr", "",
		"-store redis: HOST:PORT or a redis:// or rediss:// URL (default $"+redisAddrEnv+"); a password not in the URL comes from $"+redisPasswordEnv)
	fs.StringVar(&f.redisPrefix, "redis-prefix", "onceq:", "-store redis: the store's Prefix (redisstore.Prefix)")
	fs.DurationVar(&f.timeout, "connect-timeout", 10*time.Second, "-store postgres or redis: how long to wait for the server to connect and answer")
	return f
}

// problem is what is wrong with the store flags as given, or "".
func (f *storeFlags) problem(fs *flag.FlagSet) string {
	set := setFlags(fs)
	switch {
	case f.store != storeDynamo && f.store != storePostgres && f.store != storeRedis:
		return fmt.Sprintf("-store %q: want dynamodb, postgres or redis", f.store)
	case (set["postgres-url"] || set["url"]) && f.store != storePostgres:
		return "-postgres-url goes with -store postgres"
	case (set["redis-addr"] || set["redis-prefix"]) && f.store != storeRedis:
		return "-redis-addr and -redis-prefix go with -store redis"
	case set["connect-timeout"] && f.store == storeDynamo:
		return "-connect-timeout goes with -store postgres or redis (DynamoDB's come from the AWS SDK's settings)"
	case f.timeout <= 0:
		return fmt.Sprintf("-connect-timeout %v: want a positive duration", f.timeout)
	}
	return ""
}

// serverError is a store that could not be reached or refused the
// connection. Its text names the server (address, database, user), never
// a password.
type serverError struct {
	server string
	err    error
}

func (e *serverError) Error() string { return fmt.Sprintf("cannot connect to %s: %v", e.server, e.err) }
func (e *serverError) Unwrap() error { return e.err }

// connectPostgres opens one connection to the PostgreSQL server the flags
// name. The server's description ("PostgreSQL at host:port, database d,
// user u") comes back for the report's lines.
func (f *storeFlags) connectPostgres(ctx context.Context) (*pgx.Conn, string, error) {
	url := f.postgresURL
	if url == "" {
		url = os.Getenv(postgresURLEnv)
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		// The string is not repeated: it may hold a password.
		return nil, "PostgreSQL", errors.New("the connection string (-postgres-url or $" + postgresURLEnv + ") does not parse; its text is left out as it may hold a password")
	}
	cfg.ConnectTimeout = f.timeout
	server := fmt.Sprintf("PostgreSQL at %s, database %s, user %s", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), cfg.Database, cfg.User)
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, server, &serverError{server: server, err: postgresReason(err, cfg.Password)}
	}
	return conn, server, nil
}

// postgresReason is why a connection failed, without pgconn's prefix
// (which repeats the user and database) and never with the password.
func postgresReason(err error, password string) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		reason := fmt.Sprintf("%s (SQLSTATE %s)", pe.Message, pe.Code)
		if pe.Code == "28P01" || pe.Code == "28000" {
			reason += ": check the user and password (in the URL, $PGPASSWORD or ~/.pgpass) and the server's pg_hba.conf"
		}
		return errors.New(reason)
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		err = ce.Unwrap()
	}
	text := oneLine(err.Error())
	if password != "" {
		text = strings.ReplaceAll(text, password, "xxxxx")
	}
	return errors.New(text)
}

// redisClient makes a client for the Redis server the flags name; it
// connects on its first command. A failure then names the server.
func (f *storeFlags) redisClient() (*redis.Client, string, error) {
	addr := f.redisAddr
	if addr == "" {
		addr = os.Getenv(redisAddrEnv)
	}
	if addr == "" {
		return nil, "Redis", errors.New("no Redis address: give -redis-addr or set $" + redisAddrEnv)
	}
	opt := &redis.Options{Addr: addr}
	if strings.Contains(addr, "://") {
		var err error
		if opt, err = redis.ParseURL(addr); err != nil {
			return nil, "Redis", errors.New("the Redis URL (-redis-addr or $" + redisAddrEnv + ") does not parse; its text is left out as it may hold a password")
		}
	}
	if opt.Password == "" {
		opt.Password = os.Getenv(redisPasswordEnv)
	}
	// One try, bounded: an operator's tool reports and exits.
	opt.MaxRetries, opt.DialerRetries = -1, 1
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = f.timeout, f.timeout, f.timeout
	opt.PoolSize = 4
	opt.DisableIdentity = true
	user := opt.Username
	if user == "" {
		user = "default"
	}
	return redis.NewClient(opt), fmt.Sprintf("Redis at %s, database %d, user %s", opt.Addr, opt.DB, user), nil
}
