package kafkalambda

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/lambda/internal/lambdabatch"
	"github.com/onceq/onceq/sources/kafkasource"
)

// EventResponse is the partial batch response of a Kafka event source
// mapping (Amazon MSK or self-managed Kafka).
type EventResponse struct {
	BatchItemFailures []BatchItemFailure `json:"batchItemFailures"`
}

// BatchItemFailure names where Lambda resumes one topic-partition.
type BatchItemFailure struct {
	ItemIdentifier ItemIdentifier `json:"itemIdentifier"`
}

// ItemIdentifier is a topic-partition ("orders-3") and the offset of its
// first record that must come back.
type ItemIdentifier struct {
	Partition string `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Function is a Lambda handler for Kafka events. It is safe for
// concurrent use; build one at init and pass its Handle to lambda.Start.
type Function struct{ r *lambdabatch.Runner }

// New returns a Kafka function that runs each record through a Guard over
// store and h. The key is kafkasource.Fingerprint (the idempotency-key
// header, else a hash of topic, record key and value), as with package
// kafkasource's Source; a WithKeyFunc given through WithGuardOptions
// replaces it.
func New(store dedup.Store, h consumer.Handler, opts ...Option) (*Function, error) {
	cfg := lambdabatch.NewConfig("kafkalambda", DefaultDeadlineMargin)
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	r, err := lambdabatch.New(store, h, cfg, consumer.WithSourceKey(kafkasource.Fingerprint, kafkasource.KeyCoversBody))
	if err != nil {
		return nil, err
	}
	return &Function{r: r}, nil
}

// Guard is the Guard the function runs records through.
func (f *Function) Guard() *consumer.Guard { return f.r.Guard() }

// Handle runs the batch, partitions concurrently and each partition in
// offset order, and reports for each partition the first record that must
// come back. Its error makes Lambda retry the whole batch: it wraps
// consumer.ErrMisconfigured, or says the event could not be decoded.
func (f *Function) Handle(ctx context.Context, ev events.KafkaEvent) (EventResponse, error) {
	now := time.Now()
	parts := make([]string, 0, len(ev.Records))
	n := 0
	for p, rs := range ev.Records {
		parts = append(parts, p)
		n += len(rs)
	}
	slices.Sort(parts)
	recs := make([]lambdabatch.Record, 0, n)
	groups := make([][]int, 0, len(parts))
	for _, p := range parts {
		rs := slices.Clone(ev.Records[p])
		slices.SortStableFunc(rs, func(a, b events.KafkaRecord) int { return cmp.Compare(a.Offset, b.Offset) })
		g := make([]int, 0, len(rs))
		for i := range rs {
			m, err := kafkaMessage(&rs[i], now)
			if err != nil {
				return EventResponse{}, err
			}
			g = append(g, len(recs))
			recs = append(recs, lambdabatch.Record{Msg: m})
		}
		groups = append(groups, g)
	}
	if err := f.r.Run(ctx, recs, groups); err != nil {
		return EventResponse{}, err
	}
	var resp EventResponse
	for _, g := range groups {
		for _, j := range g {
			if recs[j].Back {
				r, _ := Record(recs[j].Msg)
				resp.BatchItemFailures = append(resp.BatchItemFailures, BatchItemFailure{ItemIdentifier: ItemIdentifier{
					Partition: r.Topic + "-" + strconv.FormatInt(r.Partition, 10), Offset: r.Offset}})
				break
			}
		}
	}
	return resp, nil
}

// Record is the Lambda record m was made from, if m comes from a Kafka
// event.
func Record(m *consumer.Message) (*events.KafkaRecord, bool) {
	r, ok := m.Handle.(*events.KafkaRecord)
	return r, ok
}

// kafkaMessage maps a record as package kafkasource maps a fetched one
// (kafkasource.ToMessage), so that kafkasource.Fingerprint gives the same key.
func kafkaMessage(r *events.KafkaRecord, now time.Time) (*consumer.Message, error) {
	key, err := base64.StdEncoding.DecodeString(r.Key)
	if err != nil {
		return nil, fmt.Errorf("kafkalambda: record %s/%d/%d: key: %w", r.Topic, r.Partition, r.Offset, err)
	}
	value, err := base64.StdEncoding.DecodeString(r.Value)
	if err != nil {
		return nil, fmt.Errorf("kafkalambda: record %s/%d/%d: value: %w", r.Topic, r.Partition, r.Offset, err)
	}
	var attrs map[string]string
	for _, hs := range r.Headers {
		for k, v := range hs {
			if attrs == nil {
				attrs = make(map[string]string)
			}
			attrs[k] = string(v) // a repeated header keeps its last value
		}
	}
	return &consumer.Message{
		ID:          r.Topic + "/" + strconv.FormatInt(r.Partition, 10) + "/" + strconv.FormatInt(r.Offset, 10),
		OrderingKey: string(key),
		Body:        value,
		Attributes:  attrs,
		Deliveries:  1, // Lambda does not say how often it sent a record
		Origin:      consumer.Origin{System: "kafka", Destination: r.Topic, Partition: int32(r.Partition), Offset: r.Offset},
		ReceivedAt:  now,
		Handle:      r,
	}, nil
}
