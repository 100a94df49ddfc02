package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
	"github.com/onceq/onceq/sources/memsource"
	"github.com/onceq/onceq/sources/sqssource"
)

// wiring is what the flags chose.
type wiring struct {
	source consumer.Source  // nil under -batch
	queue  *memsource.Queue // the memory source's queue, for -demo
	// kafka and franz are the Kafka source's options, for -batch's
	// source: kafkasource's or franzsource's, as -source chose.
	kafka     []kafkasource.Option
	franz     []franzsource.Option
	store     dedup.Store
	inventory Inventory
	totals    func(ctx context.Context) (reserved int64, orders int, err error)
	close     func() // releases what wire opened beyond the source (a pool), if set
}

// wire builds the source, store and inventory. AWS endpoints, region and
// credentials come from the SDK's standard settings (AWS_REGION,
// AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS, …); Kafka brokers from -kafka-brokers.
func wire(ctx context.Context, o options, logger *slog.Logger) (_ *wiring, err error) {
	w := &wiring{}
	defer func() {
		if err != nil && w.close != nil {
			w.close()
		}
	}()
	needAWS := o.source == "sqs" || o.store == "dynamodb"
	var db *ddb.Client
	var sqsClient *awssqs.Client
	if needAWS {
		cfg, err := config.LoadDefaultConfig(ctx, config.WithAPIOptions(o.awsAPIOptions))
		if err != nil {
			return nil, fmt.Errorf("AWS configuration: %w", err)
		}
		db = ddb.NewFromConfig(cfg)
		sqsClient = awssqs.NewFromConfig(cfg)
	}

	switch o.store {
	case "dynamodb":
		if o.createTables {
			// Every table the flags use: the records table (with batch
			// mode's offsets table), the outbox table of the events sent
			// onward, the example's own.
			if err := dynamostore.CreateTable(ctx, db, o.idempotencyTable); err != nil {
				return nil, err
			}
			if o.sendsOnward() {
				if err := dynamostore.CreateOutboxTable(ctx, db, o.idempotencyTable); err != nil {
					return nil, err
				}
			}
			if err := createExampleTables(ctx, db, o.inventoryTable, o.ordersTable, 100, 1_000_000); err != nil {
				return nil, err
			}
			if o.ship {
				if err := createDynamoTable(ctx, db, o.shipmentsTable, "order_id"); err != nil {
					return nil, err
				}
			}
		} else if err := checkExampleTables(ctx, db, o.inventoryTable, o.ordersTable); err != nil {
			return nil, err
		}
		store, err := dynamostore.New(db, dynamostore.WithTable(o.idempotencyTable), dynamostore.WithLogger(logger), dynamostore.WithMeterProvider(o.meters))
		if err != nil {
			return nil, err
		}
		w.store = store
		w.inventory = &dynamoInventory{client: db, inventory: o.inventoryTable, ordersTable: o.ordersTable, now: time.Now}
		w.totals = func(ctx context.Context) (int64, int, error) {
			return dynamoTotals(ctx, db, o.inventoryTable, o.ordersTable)
		}
	case "postgres":
		pool, err := pgxpool.New(ctx, o.postgresURL)
		if err != nil {
			return nil, fmt.Errorf("PostgreSQL: %w", err)
		}
		w.close = pool.Close
		inv := newPGInventory(o.inventoryTable, o.ordersTable)
		if o.createTables {
			// The records table with its outbox and offsets tables, and
			// the example's own.
			err = pgstore.CreateTable(ctx, pool, o.idempotencyTable)
			if err == nil {
				err = inv.create(ctx, pool, 100, 1_000_000)
			}
			if err == nil && o.ship {
				_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+pgQuote(o.shipmentsTable)+` (order_id text PRIMARY KEY, shipped bigint NOT NULL)`)
			}
		} else {
			err = inv.check(ctx, pool)
		}
		if err != nil {
			return nil, err
		}
		st, err := pgstore.New(pool, pgstore.WithTable(o.idempotencyTable))
		if err != nil {
			return nil, err
		}
		w.store, w.inventory = st, inv
		w.totals = func(ctx context.Context) (int64, int, error) { return inv.totals(ctx, pool) }
	case "redis":
		client := redis.NewClient(&redis.Options{Addr: o.redisAddr})
		w.close = func() { _ = client.Close() }
		inv := newMemoryInventory(100, 1_000_000)
		st, err := redisstore.New(client, redisstore.Prefix(o.idempotencyTable+":"))
		if err != nil {
			_ = client.Close()
			return nil, err
		}
		w.store, w.inventory = st, directInventory{inv}
		w.totals = func(context.Context) (int64, int, error) { r, n := inv.totals(); return r, n, nil }
	default:
		inv := newMemoryInventory(100, 1_000_000)
		w.store, w.inventory = memstore.New(), inv
		w.totals = func(context.Context) (int64, int, error) { r, n := inv.totals(); return r, n, nil }
	}

	switch o.source {
	case "sqs":
		opts := []sqssource.Option{sqssource.WithLogger(logger), sqssource.WithMeterProvider(o.meters)}
		if o.sqsDLQURL != "" {
			opts = append(opts, sqssource.DeadLetterQueue(o.sqsDLQURL))
		}
		src, err := sqssource.New(ctx, sqsClient, o.sqsQueueURL, opts...)
		if err != nil {
			return nil, err
		}
		w.source = src
	case "kafka":
		// Malformed orders must land somewhere, so the dead-letter topic
		// is always set (it defaults to the orders topic + "-dlq").
		opts := []kafkasource.Option{kafkagroup.DeadLetterTopic(o.kafkaDLQTopic), kafkagroup.WithLogger(logger), kafkagroup.WithMeterProvider(o.meters)}
		if o.kafkaSession > 0 || o.kafkaRebalance > 0 || o.kafkaHeartbeat > 0 {
			// A member that rejoins soon after a rebalance keeps the
			// group moving when members come and go every few seconds.
			heartbeat := o.kafkaHeartbeat
			if heartbeat == 0 {
				heartbeat = o.kafkaSession / 3
			}
			opts = append(opts, kafkagroup.HeartbeatInterval(heartbeat), kafkagroup.SessionTimeout(o.kafkaSession),
				kafkagroup.RebalanceTimeout(o.kafkaRebalance), kafkasource.JoinGroupBackoff(500*time.Millisecond))
			if o.kafkaRebalance > 0 {
				opts = append(opts, kafkagroup.RevokeTimeout(o.kafkaRebalance/2))
			}
		}
		if o.batch {
			w.kafka = opts
			break
		}
		src, err := kafkasource.New(ctx, o.brokers(), o.kafkaGroup, []string{o.kafkaTopic}, opts...)
		if err != nil {
			return nil, err
		}
		w.source = src
	case "franz":
		// The same flags as -source kafka, over franz-go: cooperative
		// rebalancing, so a member joining or leaving pauses only the
		// partitions that move.
		opts := []franzsource.Option{kafkagroup.DeadLetterTopic(o.kafkaDLQTopic), kafkagroup.WithLogger(logger), kafkagroup.WithMeterProvider(o.meters),
			franzsource.GroupProtocol(groupProtocol(o.kafkaProtocol))}
		if o.kafkaSession > 0 {
			heartbeat := o.kafkaHeartbeat
			if heartbeat == 0 {
				heartbeat = o.kafkaSession / 3
			}
			opts = append(opts, kafkagroup.HeartbeatInterval(heartbeat), kafkagroup.SessionTimeout(o.kafkaSession))
		} else if o.kafkaHeartbeat > 0 {
			opts = append(opts, kafkagroup.HeartbeatInterval(o.kafkaHeartbeat))
		}
		if o.kafkaRebalance > 0 {
			opts = append(opts, kafkagroup.RebalanceTimeout(o.kafkaRebalance), kafkagroup.RevokeTimeout(o.kafkaRebalance/2))
		}
		if o.batch {
			w.franz = opts
			break
		}
		src, err := franzsource.New(ctx, o.brokers(), o.kafkaGroup, []string{o.kafkaTopic}, opts...)
		if err != nil {
			return nil, err
		}
		w.source = src
	default:
		w.queue = memsource.NewQueue("orders")
		w.source = w.queue.Source()
	}
	return w, nil
}

// sendsOnward: the flags send events onward through the store's outbox
// (the demo's shipping stage, -send-reserved-to).
func (o options) sendsOnward() bool { return o.demo > 0 || o.sendReservedTo != "" }

// groupProtocol is -kafka-group-protocol's franz-go protocol (parseFlags
// has checked the name).
func groupProtocol(name string) franzsource.Protocol {
	switch name {
	case "consumer":
		return franzsource.ConsumerProtocol
	case "eager":
		return franzsource.Eager
	}
	return franzsource.Cooperative
}
