// Command kafkadev is a Kafka workbench for trying onceq without a Kafka
// cluster: an in-memory Kafka-protocol broker on 127.0.0.1 (franz-go's
// kfake), topic creation, a producer and a reader.
//
//	kafkadev broker -port 9092 -partitions 3 -topics orders,orders-dlq
//	kafkadev create -brokers 127.0.0.1:9092 orders orders-dlq
//	kafkadev produce -brokers 127.0.0.1:9092 -topic orders -key o-1 '{"order_id":"o-1"}'
//	kafkadev read -brokers 127.0.0.1:9092 -topic orders-dlq -n 1
//
// broker prints its address on stdout, one line, once it is listening,
// and runs until SIGTERM or SIGINT; its records live in memory only. read
// prints one line per record with control characters escaped, so a
// record's bytes never drive the terminal.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const usage = `usage: kafkadev <command> [flags]
commands:
  broker   run an in-memory Kafka broker on 127.0.0.1 until SIGTERM or SIGINT
  create   create topics (one per argument); a topic that exists is left as it is
  produce  send one record per argument (or per line of stdin) to a topic
  read     print a topic's records from the start, one line each
'kafkadev <command> -h' shows a command's flags.`

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kafkadev:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return errors.New("no command given")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	switch args[0] {
	case "broker":
		return broker(ctx, args[1:], stdout)
	case "create":
		return create(ctx, args[1:], stdout)
	case "produce":
		return produce(ctx, args[1:], stdin)
	case "read":
		return read(ctx, args[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	fmt.Fprintln(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func broker(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	port := fs.Int("port", 9092, "port on 127.0.0.1 (0: pick a free one)")
	partitions := fs.Int("partitions", 3, "partitions of seeded and auto-created topics")
	topics := fs.String("topics", "", "comma-separated topics to create at start")
	autoCreate := fs.Bool("auto-create", true, "create topics on first use (metadata requests that ask for it)")
	verbose := fs.Bool("v", false, "log broker warnings and errors to stderr")
	configs := map[string]string{}
	fs.Func("config", "a broker setting as name=value, repeatable (group.consumer.session.timeout.ms, group.share.record.lock.duration.ms, ...)", func(v string) error {
		name, value, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return fmt.Errorf("want name=value, got %q", v)
		}
		configs[name] = value
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *port < 0 || *port > 65535 {
		return fmt.Errorf("-port %d: out of range", *port)
	}
	if *partitions < 1 {
		return fmt.Errorf("-partitions %d: must be at least 1", *partitions)
	}
	// kfake binds 127.0.0.1 itself; Ports also fixes one broker.
	opts := []kfake.Opt{kfake.Ports(*port), kfake.DefaultNumPartitions(*partitions)}
	if *autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	seed := splitList(*topics)
	if len(seed) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(*partitions), seed...))
	}
	if len(configs) > 0 {
		opts = append(opts, kfake.BrokerConfigs(configs))
	}
	if *verbose {
		opts = append(opts, kfake.WithLogger(kfake.BasicLogger(os.Stderr, kfake.LogLevelWarn)))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("starting the broker: %w", err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	fmt.Fprintln(stdout, addr)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	log.Info("kafka broker listening", "addr", addr, "partitions", *partitions, "topics", seed, "auto_create", *autoCreate)
	<-ctx.Done()
	log.Info("stopping")
	return nil
}

// headerFlags collects repeated -header name=value flags.
type headerFlags []kgo.RecordHeader

func (h *headerFlags) String() string { return fmt.Sprint(len(*h), " headers") }

func (h *headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("header %q: want name=value", v)
	}
	*h = append(*h, kgo.RecordHeader{Key: name, Value: []byte(value)})
	return nil
}

// create makes each topic named, so that a worker's start-up check (which
// never creates a topic) finds its topics and its dead-letter topic.
func create(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("create", flag.ContinueOnError)
	brokers := fs.String("brokers", defaultBrokers(), "comma-separated broker addresses (default: $KAFKA_BROKERS, else 127.0.0.1:9092)")
	partitions := fs.Int("partitions", 3, "partitions of each topic")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the brokers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("create: name at least one topic")
	}
	if *partitions < 1 {
		return fmt.Errorf("create: -partitions %d: must be at least 1", *partitions)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	b := splitList(*brokers)
	cl, err := connect(ctx, *timeout, b)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	for _, t := range fs.Args() {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t, int32(*partitions), 1
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("create: brokers %s: %w", strings.Join(b, ","), err)
	}
	for _, rt := range resp.Topics {
		switch err := kerr.ErrorForCode(rt.ErrorCode); {
		case err == nil:
			fmt.Fprintf(stdout, "created %s\n", rt.Topic)
		case errors.Is(err, kerr.TopicAlreadyExists):
			fmt.Fprintf(stdout, "%s exists\n", rt.Topic)
		default:
			return fmt.Errorf("create topic %s on brokers %s: %w", rt.Topic, strings.Join(b, ","), err)
		}
	}
	return nil
}

func produce(ctx context.Context, args []string, stdin io.Reader) error {
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	brokers := fs.String("brokers", defaultBrokers(), "comma-separated broker addresses (default: $KAFKA_BROKERS, else 127.0.0.1:9092)")
	topic := fs.String("topic", "", "topic to send to (required)")
	key := fs.String("key", "", "record key of every record sent (the partition and ordering key)")
	var headers headerFlags
	fs.Var(&headers, "header", "a record header name=value (repeatable), e.g. idempotency-key=o-1")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the brokers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *topic == "" {
		return errors.New("produce: -topic is required")
	}
	values := fs.Args()
	if len(values) == 0 {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("produce: reading stdin: %w", err)
		}
		for line := range strings.Lines(string(b)) {
			if line = strings.TrimRight(line, "\r\n"); line != "" {
				values = append(values, line)
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	b := splitList(*brokers)
	cl, err := connect(ctx, *timeout, b, kgo.AllowAutoTopicCreation())
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	defer cl.Close()
	for _, v := range values {
		r := &kgo.Record{Topic: *topic, Value: []byte(v), Headers: headers}
		if *key != "" {
			r.Key = []byte(*key)
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			return fmt.Errorf("produce to topic %s on brokers %s: %w", *topic, strings.Join(b, ","), err)
		}
	}
	return nil
}

func read(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("read", flag.ContinueOnError)
	brokers := fs.String("brokers", defaultBrokers(), "comma-separated broker addresses (default: $KAFKA_BROKERS, else 127.0.0.1:9092)")
	topic := fs.String("topic", "", "topic to read from its start (required)")
	n := fs.Int("n", 0, "stop after this many records (0: stop once -wait passes with none)")
	wait := fs.Duration("wait", 10*time.Second, "how long to wait for the brokers, and then for each next record")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *topic == "" {
		return errors.New("read: -topic is required")
	}
	b := splitList(*brokers)
	cl, err := connect(ctx, *wait, b, kgo.ConsumeTopics(*topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	defer cl.Close()
	seen := 0
	for *n == 0 || seen < *n {
		pctx, cancel := context.WithTimeout(ctx, *wait)
		fetches := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if pctx.Err() != nil && fetches.NumRecords() == 0 {
			if *n == 0 {
				return nil
			}
			return fmt.Errorf("read: %d of %d records from topic %s on brokers %s within %s", seen, *n, *topic, strings.Join(b, ","), *wait)
		}
		for _, r := range fetches.Records() {
			var b strings.Builder
			fmt.Fprintf(&b, "partition=%d offset=%d key=%s", r.Partition, r.Offset, strconv.Quote(string(r.Key)))
			for _, h := range r.Headers {
				fmt.Fprintf(&b, " %s=%s", strconv.Quote(h.Key), strconv.Quote(string(h.Value)))
			}
			fmt.Fprintf(&b, " value=%s", strconv.Quote(string(r.Value)))
			fmt.Fprintln(stdout, b.String())
			if seen++; *n > 0 && seen == *n {
				break
			}
		}
	}
	return nil
}

// connect is a client of brokers once one of them has answered, so that a
// wrong address, or a broker not started or not answering, is an error
// naming the addresses at once rather than a silent wait for the
// command's whole timeout.
func connect(ctx context.Context, within time.Duration, brokers []string, opts ...kgo.Opt) (*kgo.Client, error) {
	if len(brokers) == 0 {
		return nil, errors.New("no broker address given (-brokers or $KAFKA_BROKERS)")
	}
	where := strings.Join(brokers, ",")
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("brokers %s: %w", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		cl.Close()
		if errors.Is(pctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("brokers %s did not answer within %s: %w", where, within, err)
		}
		return nil, fmt.Errorf("brokers %s: %w", where, err)
	}
	return cl, nil
}

// defaultBrokers is $KAFKA_BROKERS, the variable a worker reads too, else
// the broker command's default address.
func defaultBrokers() string {
	if b := os.Getenv("KAFKA_BROKERS"); b != "" {
		return b
	}
	return "127.0.0.1:9092"
}

func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
