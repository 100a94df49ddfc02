// Command franz-guard adds exactly-once processing to an existing franz-go
// poll loop, without handing the loop to onceq's consumer.
//
// The loop stays what it was: a kgo client in a consumer group,
// PollFetches, process each record in turn, CommitUncommittedOffsets. The
// one change is that processing goes through a consumer.Guard, which
// claims the record's idempotency key before the handler runs and records
// the result after, so a record redelivered after a crash or a rebalance,
// or sent twice by its producer, has its effect once. The Guard's outcome
// says what the loop does next:
//
//	Ack        go on to the next record
//	Retry      try the same record again after RetryAfter (Kafka cannot skip it)
//	DeadLetter produce it to the dead-letter topic with the reason, then go on
//
// The offsets of a poll are committed once all its records are done, and
// BlockRebalanceOnPoll holds a rebalance until then, so a commit never
// passes unfinished work nor lands on a partition that moved. For a worker
// pool with per-partition commits, use sources/franzsource with consumer.New.
//
//	go run ./examples/kafkadev broker -port 9092 -topics payments,payments-dlq &
//	go run ./examples/franz-guard -brokers 127.0.0.1:9092
//
// It keeps its idempotency records in memory, which dedups only within this
// process; in production pass a dedup/dynamostore Store to NewGuard.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// settings are the command's flags.
type settings struct {
	brokers, topic, group, dlqTopic string
}

func parseSettings() settings {
	var c settings
	flag.StringVar(&c.brokers, "brokers", "127.0.0.1:9092", "comma-separated Kafka brokers")
	flag.StringVar(&c.topic, "topic", "payments", "topic to read")
	flag.StringVar(&c.group, "group", "franz-guard", "consumer group")
	flag.StringVar(&c.dlqTopic, "dlq-topic", "payments-dlq", "dead-letter topic")
	flag.Parse()
	return c
}

// charge is the effect: here a log line; in real code a charge, an email,
// a row. Through the Guard it runs once per idempotency key.
func charge(log *slog.Logger) consumer.Handler {
	return consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		log.Info("charged", "key", m.IdempotencyKey, "payment", string(m.Body))
		return consumer.Result{Response: []byte("ok")}, nil
	})
}

func main() {
	c := parseSettings()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// The idempotency-key header when present, else topic + key + value:
	// the key sources/kafkasource and sources/franzsource use.
	store, err := memstore.New()
	var guard *consumer.Guard
	if err == nil {
		guard, err = consumer.NewGuard(store, charge(log), consumer.WithSourceKey(franzsource.Fingerprint, franzsource.KeyCoversBody))
	}
	if err == nil {
		err = run(c, guard)
	}
	if err != nil {
		log.Error("franz-guard", "err", err)
		os.Exit(1)
	}
}

// run polls until SIGINT or SIGTERM.
func run(c settings, guard *consumer.Guard) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cl, err := newClient(strings.Split(c.brokers, ","), c.group, c.topic)
	if err != nil {
		return err
	}
	defer cl.CloseAllowingRebalance()
	return pollLoop(ctx, cl, c.dlqTopic, guard)
}

// newClient is the loop's client: a group member that commits by hand and
// holds rebalances while a poll's records are processed.
func newClient(brokers []string, group, topic string, opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
}

// pollLoop is the existing loop with the Guard in it. It returns nil when
// ctx ends; what was polled and not committed is read again next time.
func pollLoop(ctx context.Context, cl *kgo.Client, dlqTopic string, guard *consumer.Guard) error {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		if err := fs.Err0(); err != nil {
			return err
		}
		for _, rec := range fs.Records() {
			if err := process(ctx, cl, dlqTopic, guard, rec); err != nil {
				return ignoreCancel(ctx, err)
			}
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			return ignoreCancel(ctx, err)
		}
		cl.AllowRebalance()
	}
}

// process runs one record through the Guard until it is done with.
func process(ctx context.Context, cl *kgo.Client, dlqTopic string, guard *consumer.Guard, rec *kgo.Record) error {
	for attempt := 1; ; attempt++ {
		o := guard.Process(ctx, franzsource.ToMessage(rec, attempt))
		switch o.Action() {
		case consumer.Retry:
			select {
			case <-time.After(o.RetryAfter):
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		case consumer.DeadLetter:
			dead := &kgo.Record{Topic: dlqTopic, Key: rec.Key, Value: rec.Value,
				Headers: append(rec.Headers[:len(rec.Headers):len(rec.Headers)], kgo.RecordHeader{Key: kafkagroup.ReasonHeader, Value: []byte(o.Reason())})}
			if err := cl.ProduceSync(ctx, dead).FirstErr(); err != nil {
				return fmt.Errorf("dead-lettering %s/%d/%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
			}
		}
		return nil
	}
}

// ignoreCancel turns the error of a call cut short by the end of ctx into
// nil.
func ignoreCancel(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
