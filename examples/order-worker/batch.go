package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkasource"
)

// batchReserveHandler reserves a batch of orders: their writes commit
// together, with the partition's offset. A malformed order fails alone,
// at once (Permanent), and is dead-lettered; its neighbours commit. The
// writes go in sku order, so that batches of several partitions, each
// taking its skus' rows in one transaction, take them in one order and
// never deadlock.
func batchReserveHandler(inv Inventory) batch.Handler {
	return batch.HandlerFunc(func(_ context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
		orders := make([]Order, len(msgs))
		for i, m := range msgs {
			o, err := parseOrder(m.Body)
			if err != nil {
				return nil, &batch.RecordError{Index: i, Err: retry.WithClass(err, retry.Permanent)}
			}
			orders[i] = o
		}
		slices.SortStableFunc(orders, func(a, b Order) int { return strings.Compare(a.SKU, b.SKU) })
		if br, ok := inv.(batchReserver); ok {
			return br.ReserveBatch(orders), nil
		}
		var writes []dedup.Write
		for _, o := range orders {
			writes = append(writes, inv.Reserve(o)...)
		}
		return writes, nil
	})
}

// batchReserver is an Inventory whose batch of orders takes other writes
// than each order's own.
type batchReserver interface {
	// ReserveBatch reserves orders, sorted by sku.
	ReserveBatch(orders []Order) []dedup.Write
}

// ReserveBatch updates each sku's item once, by the batch's total for it
// (a DynamoDB transaction takes one operation per item), and puts each
// order's row.
func (d *dynamoInventory) ReserveBatch(orders []Order) []dedup.Write {
	var writes []dedup.Write
	for i := 0; i < len(orders); {
		total := Order{SKU: orders[i].SKU}
		for ; i < len(orders) && orders[i].SKU == total.SKU; i++ {
			total.Qty += orders[i].Qty
		}
		writes = append(writes, d.Reserve(total)[0]) // the sku's update alone
	}
	for _, o := range orders {
		writes = append(writes, d.Reserve(o)[1]) // the order's row alone
	}
	return writes
}

// workBatch runs Kafka batch mode until ctx ends: the store's offset rows
// are the truth, duplicates are dropped by the orders' keys (orderKey, the
// per-message worker's), claimed in each batch's transaction.
func workBatch(ctx context.Context, o options, w *wiring, logger *slog.Logger, mp metric.MeterProvider, stderr io.Writer) error {
	offsets := w.store.Capabilities().Offsets
	if offsets == nil {
		return fmt.Errorf("-batch: the %s store keeps no offset rows", o.store)
	}
	if _, ok := w.inventory.(directInventory); ok {
		return errors.New("-batch: the inventory must commit with the store")
	}
	if o.history != "" {
		rec, closeHistory, err := openOffsetsHistory(o.history, offsets)
		if err != nil {
			return err
		}
		defer closeHistory()
		offsets = rec
	}
	r, err := batch.NewRunner(offsets, batchReserveHandler(w.inventory),
		batch.MaxRecords(o.batchSize), batch.DedupKeys("onceq"), batch.KeyFunc(orderKey),
		batch.WithLogger(logger), batch.WithMeterProvider(mp))
	if err != nil {
		return err
	}
	var src interface{ Run(context.Context) error }
	if o.source == "franz" {
		src, err = franzsource.NewBatch(ctx, o.brokers(), o.kafkaGroup, []string{o.kafkaTopic}, r, w.franz...)
	} else {
		src, err = kafkasource.NewBatch(ctx, o.brokers(), o.kafkaGroup, []string{o.kafkaTopic}, r, w.kafka...)
	}
	if err != nil {
		return explainStart(err, o, false)
	}
	if err := src.Run(ctx); err != nil {
		return err
	}
	if reserved, orders, err := w.totals(context.WithoutCancel(ctx)); err == nil {
		fmt.Fprintf(stderr, "order-worker: inventory reserved %d units over %d orders\n", reserved, orders)
	}
	return nil
}
