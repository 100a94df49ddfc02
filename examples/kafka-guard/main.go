// Command kafka-guard adds exactly-once processing to an existing kafka-go
// loop, without handing the loop to onceq's consumer.
//
// The loop stays what it was: a kafka-go Reader in a consumer group,
// FetchMessage, process, CommitMessages, one record at a time. The one
// change is that processing goes through a consumer.Guard, which claims
// the record's idempotency key before the handler runs and records the
// result after, so a record redelivered after a crash or a rebalance, or
// sent twice by its producer, has its effect once. The Guard's outcome
// says what the loop does next:
//
//	Ack        commit the offset
//	Retry      try the same record again after RetryAfter (Kafka cannot skip it)
//	DeadLetter write it to the dead-letter topic with the reason, then commit
//
// Records are read sequentially, so committing each one never commits past
// unfinished work. For a worker pool, rebalance draining and contiguous
// commits, use sources/kafkasource with consumer.New instead.
//
//	go run ./examples/kafkadev broker -port 9092 -topics payments,payments-dlq &
//	go run ./examples/kafka-guard -brokers 127.0.0.1:9092
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

	"github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated Kafka brokers")
	topic := flag.String("topic", "payments", "topic to read")
	group := flag.String("group", "kafka-guard", "consumer group")
	dlqTopic := flag.String("dlq-topic", "payments-dlq", "dead-letter topic")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	addrs := strings.Split(*brokers, ",")
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: addrs, GroupID: *group, Topic: *topic})
	defer func() { _ = r.Close() }()
	dlq := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: *dlqTopic, RequiredAcks: kafka.RequireAll}
	defer func() { _ = dlq.Close() }()

	store, err := memstore.New()
	if err != nil {
		log.Error("store", "err", err)
		os.Exit(2)
	}
	guard, err := consumer.NewGuard(store, consumer.HandlerFunc(
		func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
			// The effect: here a log line; in real code a charge, an email,
			// a row. It runs once per idempotency key.
			log.Info("charged", "key", m.IdempotencyKey, "payment", string(m.Body))
			return consumer.Result{Response: []byte("ok")}, nil
		}),
		// The idempotency-key header when present, else topic + key + value.
		consumer.WithSourceKey(kafkasource.Fingerprint, kafkasource.KeyCoversBody))
	if err != nil {
		log.Error("guard", "err", err)
		os.Exit(2)
	}
	if err := processLoop(ctx, r, dlq, guard); err != nil {
		log.Error("loop", "err", err)
		os.Exit(1)
	}
}

// processLoop is the existing loop with the Guard in it. It returns nil
// when ctx ends.
func processLoop(ctx context.Context, r *kafka.Reader, dlq *kafka.Writer, guard *consumer.Guard) error {
	for {
		km, err := r.FetchMessage(ctx)
		if err != nil {
			return ignoreCancel(ctx, err)
		}
		for attempt := 1; ; attempt++ {
			o := guard.Process(ctx, kafkasource.ToMessage(km, attempt))
			if o.Action() == consumer.Retry {
				select {
				case <-time.After(o.RetryAfter):
					continue
				case <-ctx.Done():
					return nil // not committed: the record is read again
				}
			}
			if o.Action() == consumer.DeadLetter {
				dead := kafka.Message{Key: km.Key, Value: km.Value,
					Headers: append(km.Headers[:len(km.Headers):len(km.Headers)], kafka.Header{Key: kafkagroup.ReasonHeader, Value: []byte(o.Reason())})}
				if err := dlq.WriteMessages(ctx, dead); err != nil {
					return ignoreCancel(ctx, fmt.Errorf("dead-lettering %s/%d/%d: %w", km.Topic, km.Partition, km.Offset, err))
				}
			}
			break
		}
		if err := r.CommitMessages(ctx, km); err != nil {
			return ignoreCancel(ctx, err)
		}
	}
}

// ignoreCancel turns the error of a call cut short by the end of ctx into
// nil: what was not committed is read again on the next start.
func ignoreCancel(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
