// Command onceq is the operator's tool for onceq's dedup store (DynamoDB,
// PostgreSQL or Redis, chosen with -store): create its table, look at a
// key, budget its capacity, and check a deployment the way a worker does
// at start.
//
// Exit codes: 0 ok, 1 failure, 2 usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/redis/go-redis/v9"
)

type quietLog struct{}

func (quietLog) Printf(context.Context, string, ...any) {}

func main() {
	// Ctrl-C cancels a running call (a table wait, a read) instead of
	// killing the process mid-request.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	// go-redis logs a failed dial to stderr by itself; the command's own
	// line already says it, naming the server.
	redis.SetLogger(quietLog{})
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

var commands = []struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}{
	{"create-table", "create the idempotency table (idempotent); -store dynamodb, postgres or redis", runCreateTable},
	{"inspect", "show the stored record of an idempotency key or key_hash; -store dynamodb, postgres or redis", runInspect},
	{"capacity", "budget capacity for a workload: DynamoDB WCU, PostgreSQL statements and rows, Redis commands and memory", runCapacity},
	{"check", "run a worker's start-up checks: store (-store dynamodb, postgres or redis), queue or topics, dead letters", runCheck},
	{"relay", "send the outbox's entries to their SQS queues or Kafka topics until SIGTERM; -store postgres or dynamodb", runRelay},
	{"redrive", "send dead letters back to their SQS queue or Kafka topic, and DEAD outbox entries back to PENDING, never re-running a completed one", runRedrive},
	{"console", "serve a web page of the store on loopback: a message's story, in-flight leases, dead letters, the outbox", runConsole},
	{"audit", "keep the audit trail of a DynamoDB table: archive completions TTL removed, report TTL lag and doubled completions", runAudit},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: onceq <command> [flags]")
	fmt.Fprintln(w, "commands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "The store is DynamoDB unless -store says postgres or redis; their connection is -postgres-url")
	fmt.Fprintln(w, "or $ONCEQ_POSTGRES_URL, -redis-addr or $ONCEQ_REDIS_ADDR.")
	fmt.Fprintln(w, "Run 'onceq <command> -h' for a command's flags.")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "onceq: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

// usageExit maps a flag parse error to its exit code.
func usageExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// newFlagSet returns the flag set of a command (name as "onceq inspect"):
// parse errors and -h go to stderr, and its usage is the given lines, then
// the flags, so every command's help reads alike.
func newFlagSet(name string, stderr io.Writer, usage ...string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		for _, line := range usage {
			fmt.Fprintln(stderr, line)
		}
		fs.PrintDefaults()
	}
	return fs
}
