package batch

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const instrumentationName = "github.com/onceq/onceq/batch"

// Attribute keys: OpenTelemetry's messaging conventions, plus onceq's own.
const (
	attrGroup     = attribute.Key("messaging.consumer.group.name")
	attrTopic     = attribute.Key("messaging.destination.name")
	attrPartition = attribute.Key("messaging.destination.partition.id")
	attrResult    = attribute.Key("onceq.result")
)

// telemetry is the Runner's metrics, through the OpenTelemetry API only.
type telemetry struct {
	records  metric.Int64Histogram
	duration metric.Float64Histogram
	lag      metric.Int64Gauge
	dead     metric.Int64Counter
	dups     metric.Int64Counter
	split    metric.Int64Counter
}

func newTelemetry(mp metric.MeterProvider) (*telemetry, error) {
	m := mp.Meter(instrumentationName)
	t := &telemetry{}
	var errs [6]error
	t.records, errs[0] = m.Int64Histogram("onceq.batch.records", metric.WithUnit("{record}"),
		metric.WithDescription("Records a committed batch (or part) holds; 0 for a commit that only moves the offset."),
		metric.WithExplicitBucketBoundaries(0, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000))
	t.duration, errs[1] = m.Float64Histogram("onceq.batch.commit.duration", metric.WithUnit("s"),
		metric.WithDescription("Time of a batch's Store commit, by result."))
	t.lag, errs[2] = m.Int64Gauge("onceq.batch.group_lag", metric.WithUnit("{offset}"),
		metric.WithDescription("The stored next offset minus the group's committed one: how far lag tools read behind the truth."))
	t.dead, errs[3] = m.Int64Counter("onceq.batch.dead_letters", metric.WithUnit("{record}"),
		metric.WithDescription("Records dead-lettered after their attempts."))
	t.dups, errs[4] = m.Int64Counter("onceq.batch.duplicates", metric.WithUnit("{record}"),
		metric.WithDescription("Records dropped because their idempotency key was already completed."))
	t.split, errs[5] = m.Int64Counter("onceq.batch.splits", metric.WithUnit("{split}"),
		metric.WithDescription("Batches split to isolate a failing record."))
	return t, errors.Join(errs[:]...)
}

func partAttrs(p Partition) attribute.Set {
	return attribute.NewSet(attrGroup.String(p.Group), attrTopic.String(p.Topic), attrPartition.String(strconv.Itoa(int(p.Partition))))
}

func (t *telemetry) committed(ctx context.Context, p Partition, n int, took time.Duration, err error) {
	result := "ok"
	switch {
	case errors.Is(err, ErrFenced):
		result = "fenced"
	case err != nil:
		result = "error"
	}
	attrs := partAttrs(p)
	t.duration.Record(ctx, took.Seconds(), metric.WithAttributes(append(attrs.ToSlice(), attrResult.String(result))...))
	if err == nil {
		t.records.Record(ctx, int64(n), metric.WithAttributeSet(attrs))
	}
}

func (t *telemetry) groupLag(ctx context.Context, p Partition, lag int64) {
	t.lag.Record(ctx, lag, metric.WithAttributeSet(partAttrs(p)))
}

func (t *telemetry) deadLettered(ctx context.Context, p Partition) {
	t.dead.Add(ctx, 1, metric.WithAttributeSet(partAttrs(p)))
}

func (t *telemetry) duplicates(ctx context.Context, n int) { t.dups.Add(ctx, int64(n)) }

func (t *telemetry) splits(ctx context.Context) { t.split.Add(ctx, 1) }
