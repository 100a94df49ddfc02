package kafka

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const instrumentationName = "github.com/onceq/onceq/sources/kafka"

const (
	attrSystem      = attribute.Key("messaging.system")
	attrDestination = attribute.Key("messaging.destination.name")
	attrPartition   = attribute.Key("messaging.destination.partition.id")
	attrGroup       = attribute.Key("messaging.consumer.group.name")
	attrResult      = attribute.Key("onceq.result")
)

// telemetry is the source's metrics. Topics are known at New, so every
// counter's attribute sets are built then; a partition's gauge set is built
// with the partition, once per generation.
type telemetry struct {
	group       string
	lateAcks    metric.Int64Counter
	deadLetters metric.Int64Counter
	commits     metric.Int64Counter
	lag         metric.Int64ObservableGauge
	reg         metric.Registration

	topicOpts  map[string][]metric.AddOption          // topic
	resultOpts map[string]map[bool][]metric.AddOption // topic → ok
	commitOpts map[bool][]metric.AddOption            // ok
}

func newTelemetry(mp metric.MeterProvider, group string, topics []string, dlq string) (*telemetry, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	t := &telemetry{group: group, topicOpts: map[string][]metric.AddOption{},
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
	return t, nil
}

// partitionSet is a partition's gauge attributes.
func (t *telemetry) partitionSet(topic string, id int32) metric.ObserveOption {
	return metric.WithAttributeSet(attribute.NewSet(attrSystem.String("kafka"), attrGroup.String(t.group),
		attrDestination.String(topic), attrPartition.String(strconv.Itoa(int(id)))))
}

func (t *telemetry) late(ctx context.Context, topic string) {
	if o, ok := t.topicOpts[topic]; ok {
		t.lateAcks.Add(ctx, 1, o...)
	}
}

func (t *telemetry) deadLettered(ctx context.Context, topic string, err error) {
	if o, ok := t.resultOpts[topic]; ok {
		t.deadLetters.Add(ctx, 1, o[err == nil]...)
	}
}

func (t *telemetry) committed(ctx context.Context, err error) {
	t.commits.Add(ctx, 1, t.commitOpts[err == nil]...)
}

// observeLag reports every dispatching partition's lag; it runs on the
// reader's collection, under the source's lock for a consistent view.
func (s *Source) observeLag(_ context.Context, o metric.Observer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.parts {
		end := max(p.hwm, p.tr.last+1)
		if p.tr.committed < 0 || end <= 0 {
			continue // nothing fetched, nothing known committed
		}
		o.ObserveInt64(s.tel.lag, max(end-p.tr.committed, 0), p.lagSet)
	}
	return nil
}
