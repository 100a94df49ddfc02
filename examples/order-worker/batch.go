package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkasource"
)

// batchReserveHandler reserves a batch of orders: their writes commit
// together, with the partition's offset. A malformed order fails alone,
// at once (Permanent), and is dead-lettered; its neighbours commit.
func batchReserveHandler(inv Inventory) batch.Handler {
	return batch.HandlerFunc(func(_ context.Context, msgs []*broker.Message) ([]any, error) {
		var writes []any
		for i, m := range msgs {
			o, err := parseOrder(m.Body)
			if err != nil {
				return nil, &batch.RecordError{Index: i, Err: retry.WithClass(err, retry.Permanent)}
			}
			writes = append(writes, inv.Reserve(o)...)
		}
		return writes, nil
	})
}

// workBatch runs Kafka batch mode until ctx ends: the store's offset rows
// are the truth, duplicates are dropped by the orders' keys (orderKey, the
// per-message worker's), claimed in each batch's transaction.
func workBatch(ctx context.Context, o options, w *wiring, logger *slog.Logger, mp metric.MeterProvider, stderr io.Writer) error {
	prov, ok := w.store.(batch.Provider)
	if !ok {
		return fmt.Errorf("-batch: the %s store keeps no offset rows", o.store)
	}
	if _, ok := w.inventory.(directInventory); ok {
		return errors.New("-batch: the inventory must commit with the store")
	}
	r, err := batch.NewRunner(prov.Offsets(), batchReserveHandler(w.inventory),
		batch.MaxRecords(o.batchSize), batch.DedupKeys("onceq"), batch.KeyFunc(orderKey),
		batch.WithLogger(logger), batch.WithMeterProvider(mp))
	if err != nil {
		return err
	}
	var src interface{ Run(context.Context) error }
	if o.source == "franz" {
		src, err = franzsource.NewBatch(ctx, o.brokers(), o.kafkaGroup, []string{o.kafkaTopic}, r, w.kafka...)
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
