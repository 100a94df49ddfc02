package sqslambda

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/lambda/internal/lambdabatch"
	"github.com/onceq/onceq/sources/sqssource"
)

// Function is a Lambda handler for SQS events. It is safe for concurrent
// use; build one at init and pass its Handle to lambda.Start.
type Function struct {
	r          *lambdabatch.Runner
	visibility *visibility
}

// New returns an SQS function that runs each record through a Guard over
// store and h, built with the options given by WithGuardOptions. The key
// is the idempotency-key attribute, else the body's SHA-256, as with
// package sqssource.
func New(store dedup.Store, h consumer.Handler, opts ...Option) (*Function, error) {
	cfg := config{batch: lambdabatch.NewConfig("sqslambda", DefaultDeadlineMargin)}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	r, err := lambdabatch.New(store, h, cfg.batch)
	if err != nil {
		return nil, err
	}
	return &Function{r: r, visibility: cfg.visibility}, nil
}

// Guard is the Guard the function runs records through.
func (f *Function) Guard() *consumer.Guard { return f.r.Guard() }

// Handle runs the batch and reports the records that must come back, by
// MessageId. Its error, which makes Lambda retry the whole batch, wraps
// consumer.ErrMisconfigured: the deployment is at fault, not a record.
func (f *Function) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	now := time.Now()
	recs := make([]lambdabatch.Record, len(ev.Records))
	groups := make([][]int, 0, len(ev.Records))
	// Records that must run one after the other, as groups (indexes into
	// groups): a FIFO queue's message groups; on a standard queue, copies
	// of one message (the same idempotency-key attribute, or the same
	// body), so that the second finds the first's COMPLETED record and is
	// a duplicate instead of coming back because the first holds its key.
	byGroup, byKey, byBody := map[string]int{}, map[string]int{}, map[string]int{}
	join := func(index map[string]int, k string, i int) {
		if g, ok := index[k]; ok {
			groups[g] = append(groups[g], i)
			return
		}
		index[k] = len(groups)
		groups = append(groups, []int{i})
	}
	for i := range ev.Records {
		m := sqsMessage(&ev.Records[i], now)
		recs[i].Msg = m
		switch k, keyed := m.Attributes[consumer.IdempotencyKeyAttribute]; {
		case m.OrderingKey != "":
			join(byGroup, m.OrderingKey, i)
		case keyed:
			join(byKey, k, i)
		default:
			join(byBody, ev.Records[i].Body, i)
		}
	}
	if err := f.r.Run(ctx, recs, groups); err != nil {
		return events.SQSEventResponse{}, err
	}
	callCtx, cancel := f.r.CallContext(ctx)
	defer cancel()
	f.changeVisibility(callCtx, ev, recs)
	var resp events.SQSEventResponse
	for i := range recs {
		if recs[i].Back {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
		}
	}
	return resp, nil
}

// Record is the Lambda record m was made from, if m comes from an SQS
// event.
func Record(m *consumer.Message) (*events.SQSMessage, bool) {
	r, ok := m.Handle.(*events.SQSMessage)
	return r, ok
}

// sqsMessage maps a record as package sqssource maps a received message.
func sqsMessage(r *events.SQSMessage, now time.Time) *consumer.Message {
	queue := r.EventSourceARN
	if i := strings.LastIndexByte(queue, ':'); i >= 0 {
		queue = queue[i+1:]
	}
	attempt, err := strconv.Atoi(r.Attributes["ApproximateReceiveCount"])
	if err != nil || attempt < 1 {
		attempt = 1
	}
	m := &consumer.Message{
		ID:         r.MessageId,
		Body:       []byte(r.Body),
		Attributes: sqsAttributes(r.MessageAttributes),
		Deliveries: attempt,
		Origin:     consumer.Origin{System: sqssource.System, Destination: queue},
		ReceivedAt: now,
		Handle:     r,
	}
	if strings.HasSuffix(queue, ".fifo") {
		m.OrderingKey = r.Attributes["MessageGroupId"]
	}
	return m
}

// sqsAttributes keeps String and Number attributes (and their custom
// subtypes), as package sqssource does; Binary ones stay in the record.
func sqsAttributes(in map[string]events.SQSMessageAttribute) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		if (strings.HasPrefix(v.DataType, "String") || strings.HasPrefix(v.DataType, "Number")) && v.StringValue != nil {
			out[k] = *v.StringValue
		}
	}
	return out
}
