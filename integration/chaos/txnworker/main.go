// Command txnworker is the chaos driver's Kafka-transactions processor
// (chaos -txn): a franztxn.Processor that, for each input record, sends
// -outputs records to the output topic, each naming its input (the
// input's idempotency key, the output's index, and the input's partition
// and offset), committed with the consumed offsets in one Kafka
// transaction. The driver kills and restarts it under the same
// -transactional-id, and reads the output topic read_committed.
//
// SIGTERM or SIGINT stops it: the transaction under way is aborted, and
// it leaves the group and exits 0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/franztxn"
	"github.com/onceq/onceq/integration/history"
	"github.com/onceq/onceq/outbox"
)

type options struct {
	brokers, group, topic, out, txnID string
	outputs                           int
	session, rebalance, heartbeat     time.Duration
	txnTimeout                        time.Duration
	maxPoll                           int
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("txnworker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.brokers, "brokers", "", "Kafka bootstrap brokers, comma-separated")
	fs.StringVar(&o.group, "group", "", "consumer group")
	fs.StringVar(&o.topic, "topic", "", "input topic")
	fs.StringVar(&o.out, "out", "", "output topic")
	fs.StringVar(&o.txnID, "transactional-id", "", "this worker's transactional ID (the same again when it restarts)")
	fs.IntVar(&o.outputs, "outputs", 2, "output records per input")
	fs.DurationVar(&o.session, "session-timeout", 6*time.Second, "group session timeout")
	// Short, as the driver's other workers' are: it also bounds the end
	// of the transaction under way at a stop, which must fit the driver's
	// grace for a leave.
	fs.DurationVar(&o.rebalance, "rebalance-timeout", 5*time.Second, "group rebalance timeout (above one transaction's time)")
	fs.DurationVar(&o.heartbeat, "heartbeat", 500*time.Millisecond, "group heartbeat")
	fs.DurationVar(&o.txnTimeout, "transaction-timeout", 10*time.Second, "how long the broker lets a transaction stay open")
	fs.IntVar(&o.maxPoll, "max-poll", 50, "input records in one transaction at most")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.brokers == "" || o.group == "" || o.topic == "" || o.out == "" || o.txnID == "" || o.outputs < 1 {
		return o, errors.New("-brokers, -group, -topic, -out and -transactional-id are needed, -outputs at least 1")
	}
	return o, nil
}

// handler sends o.outputs records per input to o.out, keyed by the input's
// key so that they share a partition, in index order.
func handler(o options) consumer.Handler {
	return consumer.HandlerFunc(func(_ context.Context, m *broker.Message) (consumer.Result, error) {
		var res consumer.Result
		for i := range o.outputs {
			body, err := json.Marshal(history.TxnOutput{Input: m.IdempotencyKey, Index: i, InPartition: m.Origin.Partition, InOffset: m.Origin.Offset})
			if err != nil {
				return res, consumer.Permanent(err)
			}
			res.Outbox = append(res.Outbox, outbox.Message{Destination: o.out, OrderingKey: m.IdempotencyKey, Body: body})
		}
		return res, nil
	})
}

// restartLine is the message logged each time the processor stopped
// with ErrTransaction and a new one starts; the driver counts them.
const restartLine = "txnworker: the processor stopped on a transaction error; a new one starts under the same transactional ID"

// run runs processors until ctx ends. A processor that stops with
// ErrTransaction (its client can no longer end a transaction) is replaced
// at once under the same transactional ID, as a supervisor restarting
// the process would: the new one's start fences the old producer and
// aborts its open transaction. Any other stop ends run.
func run(ctx context.Context, o options, logger *slog.Logger) error {
	for {
		p, err := franztxn.New(ctx, strings.Split(o.brokers, ","), o.group, []string{o.topic}, o.txnID, handler(o),
			franztxn.WithLogger(logger),
			franztxn.SessionTimeout(o.session), franztxn.RebalanceTimeout(o.rebalance), franztxn.HeartbeatInterval(o.heartbeat),
			franztxn.TransactionTimeout(o.txnTimeout), franztxn.MaxPollRecords(o.maxPoll), franztxn.FetchMaxWait(500*time.Millisecond))
		if err == nil {
			err = p.Run(ctx)
		}
		switch {
		case ctx.Err() != nil:
			return nil // stopped: a processor cut short by it has nothing to report
		case err == nil || !errors.Is(err, franztxn.ErrTransaction):
			return err
		}
		logger.Warn(restartLine, "error", err.Error())
	}
}

func main() {
	o, err := parse(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "txnworker:", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, logger); err != nil {
		logger.Error("txnworker stopped", "error", err.Error())
		os.Exit(1)
	}
}
