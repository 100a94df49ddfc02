// Command chaos is the reliability proof of the example order worker: it
// runs several worker processes against the SQS emulator (-source sqs) or
// a loopback Kafka broker process (-source kafka, franz or share) and DynamoDB Local
// (behind the fault proxy, which throttles, fails, resets and delays
// requests), SIGKILLs and restarts a random worker every few seconds (on
// Kafka every third event is a graceful leave and rejoin instead, on a
// share group a freeze past the record lock), and
// once the queue or group is drained checks the tables: every unique valid order
// applied exactly once, every malformed one in the dead-letter queue,
// nothing left PENDING. It prints one line and exits non-zero on any loss
// or doubling.
//
// Each worker also records its store calls and acks (-history); the
// driver checks every key's history for linearizability against a model of
// the record and counts Jepsen's anomalies, printed on a "chaos: history:"
// line before the last one; a violation or an anomaly fails the run.
//
// The servers come from the environment integration/servers.sh writes
// (ONCEQ_DYNAMODB_ENDPOINT, and ONCEQ_SQS_ENDPOINT for SQS); `make chaos`
// starts them. The Kafka broker is started by the driver itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// settings is every knob of a run.
type settings struct {
	source         string
	partitions     int
	kafkaSession   time.Duration
	groupProtocol  string
	kafkaRebalance time.Duration
	workers        int
	orders         int
	dupPercent     int
	malformed      int
	killEvery      time.Duration
	throttleRate   float64
	errorRate      float64
	resetRate      float64
	latencyRate    float64
	latency        time.Duration
	leaseTTL       time.Duration
	handlerTO      time.Duration
	visibility     time.Duration
	concurrency    int
	timeout        time.Duration
	seed           uint64
	workerBin      string // prebuilt order-worker; empty builds it
	onceqBin       string // prebuilt onceq (relays, redrives); empty builds it
	kafkadevBin    string // prebuilt kafkadev (the Kafka broker); empty builds it
	dynamoDBURL    string
	store          string
	postgresURL    string
	sqsURL         string
	verboseWorker  bool
	batch          bool
	// pipeline runs the two-stage pipeline: relays and shipping workers
	// beside the order workers.
	pipeline    bool
	relays      int
	shipWorkers int
	relayLease  time.Duration
	relayBatch  int
	// redrive parks orders in the dead-letter queue and redrives them
	// with onceq redrive while the workers are killed.
	redrive      bool
	redriveDelay time.Duration
	// txn runs Kafka transactions: franztxn processors, no store.
	txn        bool
	txnOutputs int
}

func parseFlags(args []string, stderr io.Writer) (settings, error) {
	var c settings
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&c.batch, "batch", false, "run the workers in Kafka batch mode (-source kafka or franz): each partition's offset committed with its batch's writes; the history checked is the offset rows' (every offset committed once, in order, under a token that only rises)")
	fs.BoolVar(&c.pipeline, "pipeline", false, "run the two-stage pipeline: the order workers send order.reserved through the store's outbox to a second queue or topic, -relays onceq relay processes send it, -ship-workers shipping workers ship each order; all three are killed, and every order must ship exactly once")
	fs.IntVar(&c.relays, "relays", 2, "-pipeline: relay processes (onceq relay)")
	fs.IntVar(&c.shipWorkers, "ship-workers", 2, "-pipeline: shipping worker processes")
	fs.DurationVar(&c.relayLease, "relay-lease-ttl", 0, "-pipeline: the relays' lease on the entries they send (a killed relay's are taken over after it); 0: onceq relay's default")
	fs.IntVar(&c.relayBatch, "relay-batch", 0, "-pipeline: the entries a relay leases per pass; 0: onceq relay's default")
	fs.BoolVar(&c.txn, "txn", false, "run Kafka transactions (-source franz): -workers franztxn processors, killed and restarted under their transactional IDs, commit each poll's outputs with its offsets in one transaction; a read_committed reader must see every input's outputs exactly once, in order (no store)")
	fs.BoolVar(&c.redrive, "redrive", false, "redrive dead letters and DEAD outbox entries (-source sqs, kafka or franz; turns on -pipeline): every twentieth order is parked in the dead-letter queue or topic instead of sent, and a refuser beside the relays marks every tenth outbox entry DEAD (some twice; half of them after sending a copy, as a destination that took it and answered with a refusal); two onceq redrive processes at once and then a third send back every dead letter (the parked ones, and the malformed ones the workers dead-lettered, whose records they reset; on Kafka the third reads the topic from its start in a group of its own, so it looks at every letter again) and as many send the DEAD entries back to PENDING, while workers, relays and shipping workers are killed; every order must still be applied and shipped exactly once, and the history check counts the resets the redrives logged")
	fs.DurationVar(&c.redriveDelay, "redrive-delay", 0, "-redrive: when the first two redrives of each kind start, after the workers; the third starts five times as long after they end (0: four -kill-every)")
	fs.IntVar(&c.txnOutputs, "txn-outputs", 2, "-txn: output records per input")
	fs.StringVar(&c.source, "source", "sqs", "broker: sqs, kafka (the worker's kafka-go source), franz (its franz-go source, on the same Kafka broker) or share (a share group on that broker, its records redelivered by lock expiry when a frozen member's lock runs out)")
	fs.StringVar(&c.store, "store", "dynamodb", "the workers' store: dynamodb (with the fault proxy's throttles, errors, resets and latency) or postgres (kills only; ONCEQ_POSTGRES_URL)")
	fs.IntVar(&c.partitions, "partitions", 6, "partitions of the Kafka topics")
	fs.StringVar(&c.groupProtocol, "group-protocol", "cooperative", "-source franz: the workers' group protocol: cooperative, consumer (KIP-848, the broker assigns partitions) or eager")
	fs.DurationVar(&c.kafkaSession, "kafka-session-timeout", 6*time.Second, "the workers' Kafka group session timeout (brokers refuse less than 6s by default)")
	fs.DurationVar(&c.kafkaRebalance, "kafka-rebalance-timeout", 3*time.Second, "the workers' Kafka group rebalance timeout")
	fs.IntVar(&c.workers, "workers", 3, "worker processes")
	fs.IntVar(&c.orders, "orders", 20_000, "valid order deliveries, duplicates included")
	fs.IntVar(&c.dupPercent, "dup", 20, "percent of the valid deliveries that repeat an earlier order (same key, new message)")
	fs.IntVar(&c.malformed, "malformed", 20, "malformed deliveries (must end in the dead-letter queue)")
	fs.DurationVar(&c.killEvery, "kill-every", 2*time.Second, "mean interval between SIGKILLs of a random worker (0: none)")
	fs.Float64Var(&c.throttleRate, "throttle", 0.10, "fraction of DynamoDB requests answered with a throttle")
	fs.Float64Var(&c.errorRate, "errors", 0.01, "fraction answered with HTTP 500")
	fs.Float64Var(&c.resetRate, "resets", 0.01, "fraction whose connection is reset")
	fs.Float64Var(&c.latencyRate, "latency-rate", 0.05, "fraction delayed by -latency")
	fs.DurationVar(&c.latency, "latency", 50*time.Millisecond, "added latency")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", 4*time.Second, "the workers' lease (short, so a killed worker's claims are taken over quickly)")
	fs.DurationVar(&c.handlerTO, "handler-timeout", time.Second, "the workers' handler timeout")
	fs.DurationVar(&c.visibility, "visibility", 5*time.Second, "SQS visibility timeout of the chaos queue")
	fs.IntVar(&c.concurrency, "concurrency", 16, "handlers per worker")
	fs.DurationVar(&c.timeout, "timeout", 45*time.Minute, "give up (and fail) after this long (Kafka runs are slower: every kill or leave is a group rebalance)")
	fs.Uint64Var(&c.seed, "seed", uint64(time.Now().UnixNano()), "random seed (faults, kills, order of sends)")
	fs.StringVar(&c.workerBin, "worker-bin", "", "order-worker binary (default: built from examples/order-worker)")
	fs.StringVar(&c.onceqBin, "onceq-bin", "", "onceq binary, for -pipeline's relays and -redrive's redrives (default: built from cmd/onceq)")
	fs.StringVar(&c.kafkadevBin, "kafkadev-bin", "", "kafkadev binary, the Kafka broker (default: built from examples/kafkadev)")
	fs.BoolVar(&c.verboseWorker, "worker-logs", false, "pass the workers' stderr through")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.redrive {
		// The outbox's DEAD entries are the pipeline's.
		c.pipeline = true
		if c.redriveDelay == 0 {
			c.redriveDelay = 4 * c.killEvery
		}
	}
	c.dynamoDBURL = os.Getenv("ONCEQ_DYNAMODB_ENDPOINT")
	c.sqsURL = os.Getenv("ONCEQ_SQS_ENDPOINT")
	c.postgresURL = os.Getenv("ONCEQ_POSTGRES_URL")
	switch {
	case c.source != "sqs" && c.source != "kafka" && c.source != "franz" && c.source != "share":
		return c, fmt.Errorf("-source %q: want sqs, kafka, franz or share", c.source)
	case c.source == "share" && (c.batch || c.pipeline):
		return c, errors.New("-source share does not go with -batch or -pipeline")
	case c.groupProtocol != "cooperative" && c.groupProtocol != "consumer" && c.groupProtocol != "eager":
		return c, fmt.Errorf("-group-protocol %q: want cooperative, consumer or eager", c.groupProtocol)
	case c.groupProtocol != "cooperative" && (c.source != "franz" || c.txn):
		return c, errors.New("-group-protocol needs -source franz and no -txn (the kafka-go source has only the classic protocol)")
	case c.batch && c.source == "sqs":
		return c, errors.New("-batch needs -source kafka or franz")
	case c.pipeline && c.batch:
		return c, errors.New("-pipeline does not go with -batch")
	case c.txn && c.source != "franz":
		return c, errors.New("-txn needs -source franz (its processor is franz-go's)")
	case c.txn && (c.batch || c.pipeline):
		return c, errors.New("-txn does not go with -batch or -pipeline")
	case c.redrive && (c.source == "share" || c.batch || c.txn):
		return c, errors.New("-redrive needs -source sqs, kafka or franz, and goes with neither -batch nor -txn")
	case c.redriveDelay < 0:
		return c, errors.New("-redrive-delay must not be negative")
	case c.txn && c.txnOutputs < 1:
		return c, errors.New("-txn-outputs must be at least 1")
	case c.pipeline && (c.relays < 1 || c.shipWorkers < 1):
		return c, errors.New("-pipeline needs -relays and -ship-workers of at least 1")
	case c.workers < 1 || c.orders < 1 || c.dupPercent < 0 || c.dupPercent > 90 || c.malformed < 0 || c.partitions < 1:
		return c, errors.New("-workers, -orders and -partitions must be positive, -dup within 0..90, -malformed not negative")
	case c.store != "dynamodb" && c.store != "postgres":
		return c, fmt.Errorf("-store %q: want dynamodb or postgres", c.store)
	case c.txn:
		// No store: the broker is the driver's own.
	case c.store == "postgres" && c.postgresURL == "":
		return c, errors.New("-store postgres needs ONCEQ_POSTGRES_URL (start the servers with integration/servers.sh and load its env file)")
	case (c.store == "dynamodb" && c.dynamoDBURL == "") || (c.source == "sqs" && c.sqsURL == ""):
		return c, errors.New("ONCEQ_DYNAMODB_ENDPOINT (and for SQS ONCEQ_SQS_ENDPOINT) must be set (start the servers with integration/servers.sh and load its env file)")
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, cfg, os.Stderr)
	if res != nil && res.history != nil {
		fmt.Println("chaos: " + res.history.Line())
	}
	if res != nil && res.offsets != nil {
		fmt.Println("chaos: " + res.offsets.Line())
	}
	if res != nil && res.txn != nil {
		fmt.Println("chaos: " + res.txn.Line())
	}
	if res != nil && res.pipeline != nil {
		fmt.Println(res.pipeline.line())
	}
	if res != nil && res.redrive != nil {
		fmt.Println(res.redrive.line())
	}
	if res != nil {
		fmt.Println(res.line())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}
