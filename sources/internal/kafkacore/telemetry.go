package kafkacore

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const (
	attrSystem      = attribute.Key("messaging.system")
	attrDestination = attribute.Key("messaging.destination.name")
	attrPartition   = attribute.Key("messaging.destination.partition.id")
	attrGroup       = attribute.Key("messaging.consumer.group.name")
	attrResult      = attribute.Key("onceq.result")
)

// Telemetry is a Kafka source's metrics; both sources report the same
// instruments under their own instrumentation scope. Topics are known at
// New, so every counter's attribute sets are built then; a partition's
// gauge set is built with the partition, once per assignment.
type Telemetry struct {
	group       string
	lateAcks    metric.Int64Counter
	deadLetters metric.Int64Counter
	commits     metric.Int64Counter
	lag         metric.Int64ObservableGauge
	holdAge     metric.Float64ObservableGauge
	reg         metric.Registration
	gauges      Gauges

	topicOpts  map[string][]metric.AddOption          // topic
	resultOpts map[string]map[bool][]metric.AddOption // topic → ok
	commitOpts map[bool][]metric.AddOption            // ok
}

// Gauges yield, on each collection, every assigned partition's commit lag
// (see [Tracker.Lag]) and how long its oldest unfinished record has held
// the commit, with its [Telemetry.PartitionSet]. A Dispatcher is one.
type Gauges interface {
	Lags(yield func(lag int64, set metric.ObserveOption))
	HoldAges(yield func(age time.Duration, set metric.ObserveOption))
}

// NewTelemetry creates the instruments under scope, the partition gauges
// read from g. Unregister ends the callback.
func NewTelemetry(mp metric.MeterProvider, scope, group string, topics []string, dlq string, g Gauges) (*Telemetry, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(scope)
	t := &Telemetry{group: group, gauges: g, topicOpts: map[string][]metric.AddOption{},
		resultOpts: map[string]map[bool][]metric.AddOption{}, commitOpts: map[bool][]metric.AddOption{}}
	var err error
	if t.lateAcks, err = m.Int64Counter("onceq.kafka.late_settles",
		metric.WithDescription("Settles dropped because their partition was released (an old generation's): the new owner reads the message again.")); err != nil {
		return nil, err
	}
	if t.deadLetters, err = m.Int64Counter("onceq.kafka.dead_letters",
		metric.WithDescription("Messages produced to the dead-letter topic, by result.")); err != nil {
		return nil, err
	}
	if t.commits, err = m.Int64Counter("onceq.kafka.commits",
		metric.WithDescription("Offset commits (one call per generation and interval, covering every partition that moved), by result.")); err != nil {
		return nil, err
	}
	if t.lag, err = m.Int64ObservableGauge("onceq.kafka.commit_lag",
		metric.WithDescription("Per assigned partition: the log end offset (or one past the highest fetched) minus the committed offset.")); err != nil {
		return nil, err
	}
	if t.holdAge, err = m.Float64ObservableGauge("onceq.kafka.commit_hold_age", metric.WithUnit("s"),
		metric.WithDescription("Per assigned partition: how long its oldest unfinished record has held the commit. The consumer stops past 3/4 of its Retention.")); err != nil {
		return nil, err
	}
	set := func(kv ...attribute.KeyValue) []metric.AddOption {
		kv = append(kv, attrSystem.String("kafka"), attrGroup.String(group))
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
	}
	for _, tp := range append(append([]string(nil), topics...), dlq) {
		t.topicOpts[tp] = set(attrDestination.String(tp))
		t.resultOpts[tp] = map[bool][]metric.AddOption{
			true:  set(attrDestination.String(tp), attrResult.String("ok")),
			false: set(attrDestination.String(tp), attrResult.String("error")),
		}
	}
	t.commitOpts[true] = set(attrResult.String("ok"))
	t.commitOpts[false] = set(attrResult.String("error"))
	if t.reg, err = m.RegisterCallback(t.observeGauges, t.lag, t.holdAge); err != nil {
		return nil, err
	}
	return t, nil
}

// Unregister stops the commit-lag callback.
func (t *Telemetry) Unregister() error { return t.reg.Unregister() }

func (t *Telemetry) observeGauges(_ context.Context, o metric.Observer) error {
	t.gauges.Lags(func(lag int64, set metric.ObserveOption) { o.ObserveInt64(t.lag, lag, set) })
	t.gauges.HoldAges(func(age time.Duration, set metric.ObserveOption) { o.ObserveFloat64(t.holdAge, age.Seconds(), set) })
	return nil
}

// PartitionSet is a partition's gauge attributes.
func (t *Telemetry) PartitionSet(topic string, id int32) metric.ObserveOption {
	return metric.WithAttributeSet(attribute.NewSet(attrSystem.String("kafka"), attrGroup.String(t.group),
		attrDestination.String(topic), attrPartition.String(strconv.Itoa(int(id)))))
}

// Late counts a settle dropped because its partition was released.
func (t *Telemetry) Late(ctx context.Context, topic string) {
	if o, ok := t.topicOpts[topic]; ok {
		t.lateAcks.Add(ctx, 1, o...)
	}
}

// DeadLettered counts a produce to the dead-letter topic.
func (t *Telemetry) DeadLettered(ctx context.Context, topic string, err error) {
	if o, ok := t.resultOpts[topic]; ok {
		t.deadLetters.Add(ctx, 1, o[err == nil]...)
	}
}

// Committed counts a commit call.
func (t *Telemetry) Committed(ctx context.Context, err error) {
	t.commits.Add(ctx, 1, t.commitOpts[err == nil]...)
}
