package sqssource

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const instrumentationName = "github.com/onceq/onceq/sources/sqssource"

const (
	attrSystem      = attribute.Key("messaging.system")
	attrDestination = attribute.Key("messaging.destination.name")
	attrOperation   = attribute.Key("onceq.sqs.operation")
	attrResult      = attribute.Key("onceq.result")
)

// Results: "lost" is a receipt handle that no longer names our delivery
// (its visibility ran out), apart from other failures.
const (
	resultOK    = "ok"
	resultLost  = "lost"
	resultError = "error"
)

var results = [...]string{resultOK, resultLost, resultError}

// visibilityOps are the reasons a ChangeMessageVisibility is sent.
var visibilityOps = [...]string{"Extend", "Nack", "Release"}

// telemetry is the source's metrics. The attribute combinations are few and
// known, so every option slice is built once in New: the hot paths add with
// no allocation of their own.
type telemetry struct {
	visibility  metric.Int64Counter
	deadLetters metric.Int64Counter
	batches     metric.Int64Counter
	failures    metric.Int64Counter

	visibilityOpts map[string]map[string][]metric.AddOption // op → result
	resultOpts     map[string][]metric.AddOption            // result
}

func newTelemetry(mp metric.MeterProvider, queue string) (*telemetry, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	t := &telemetry{visibilityOpts: map[string]map[string][]metric.AddOption{}, resultOpts: map[string][]metric.AddOption{}}
	var err error
	if t.visibility, err = m.Int64Counter("onceq.sqs.visibility_changes",
		metric.WithDescription("ChangeMessageVisibility calls, by reason (Extend: a heartbeat; Nack: a retry delay; Release: given back on close) and result.")); err != nil {
		return nil, err
	}
	if t.deadLetters, err = m.Int64Counter("onceq.sqs.dead_letters",
		metric.WithDescription("Messages sent to the dead-letter queue, by result.")); err != nil {
		return nil, err
	}
	if t.batches, err = m.Int64Counter("onceq.sqs.delete_batches",
		metric.WithDescription("DeleteMessageBatch calls, by result (a call whose every entry failed is an error).")); err != nil {
		return nil, err
	}
	if t.failures, err = m.Int64Counter("onceq.sqs.delete_failures",
		metric.WithDescription("Acks that could not be carried out, by result (lost: the visibility ran out first); the message comes back and dedup recognises it.")); err != nil {
		return nil, err
	}
	base := []attribute.KeyValue{attrSystem.String("aws_sqs"), attrDestination.String(queue)}
	set := func(kv ...attribute.KeyValue) []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), kv...)...))}
	}
	for _, r := range results {
		t.resultOpts[r] = set(attrResult.String(r))
	}
	for _, op := range visibilityOps {
		t.visibilityOpts[op] = map[string][]metric.AddOption{}
		for _, r := range results {
			t.visibilityOpts[op][r] = set(attrOperation.String(op), attrResult.String(r))
		}
	}
	return t, nil
}

func resultOf(err error) string {
	switch {
	case err == nil:
		return resultOK
	case errors.Is(err, ErrDeliveryLost) || isLostHandle(err):
		return resultLost
	}
	return resultError
}

func (t *telemetry) visibilityChanged(ctx context.Context, op string, err error) {
	if o, ok := t.visibilityOpts[op]; ok {
		t.visibility.Add(ctx, 1, o[resultOf(err)]...)
	}
}

func (t *telemetry) deadLettered(ctx context.Context, err error) {
	t.deadLetters.Add(ctx, 1, t.resultOpts[resultOf(err)]...)
}

func (t *telemetry) deleteBatch(ctx context.Context, err error) {
	t.batches.Add(ctx, 1, t.resultOpts[resultOf(err)]...)
}

func (t *telemetry) deleteFailed(ctx context.Context, err error) {
	t.failures.Add(ctx, 1, t.resultOpts[resultOf(err)]...)
}
