package kafkalambda

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/lambda/internal/lambdabatch"
)

// BatchFunction is a Lambda handler for Kafka events in batch mode: each
// event's records of one topic-partition go, in offset order, to a
// batch.Runner, whose batches commit their writes with the partition's
// offset row (see package batch). It is safe for concurrent use; build
// one at init and pass its Handle to lambda.Start.
//
// Each invocation takes the offset row of each of its partitions (the
// member is its request ID), so an earlier invocation still running (one
// Lambda timed out and retried) is fenced: its commits are refused.
// Records below the stored next offset, committed by an earlier
// invocation, are not run again. For each partition the function reports
// the first record not committed, from which Lambda resumes: with no
// dead-letter destination, a record that fails its attempts is reported,
// never dropped.
type BatchFunction struct {
	r     *batch.Runner
	group string
	cfg   lambdabatch.Config
}

// NewBatch returns a Kafka function in batch mode running r. group names
// the partitions' offset rows: the event source mapping's consumer group,
// or any name this function keeps. It takes Concurrency (partitions run
// at once), DeadlineMargin, WithDeadLetters (or DeadLetterTopic) and
// WithLogger; the Runner's own options say the rest.
func NewBatch(r *batch.Runner, group string, opts ...Option) (*BatchFunction, error) {
	cfg := lambdabatch.NewConfig("kafkalambda", DefaultDeadlineMargin)
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	invalid := func(what string) error { return fmt.Errorf("kafkalambda: %w: %s", configerr.ErrInvalidConfig, what) }
	switch {
	case r == nil:
		return nil, invalid("NewBatch: no batch.Runner")
	case group == "":
		return nil, invalid("NewBatch: no group")
	case cfg.Concurrency < 1:
		return nil, invalid(fmt.Sprintf("Concurrency %d: must be at least 1", cfg.Concurrency))
	case cfg.DeadlineMargin < time.Second:
		return nil, invalid(fmt.Sprintf("DeadlineMargin %v: must be at least 1s", cfg.DeadlineMargin))
	case len(cfg.GuardOptions) > 0:
		return nil, invalid("WithGuardOptions: batch mode runs no Guard (the Runner's options say how it runs)")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &BatchFunction{r: r, group: group, cfg: cfg}, nil
}

// Handle runs the event's partitions, at most Concurrency at once, each
// through the Runner until its records are committed or DeadlineMargin
// before the invocation's deadline, and reports for each partition the
// first record not committed. Its error, for an event that cannot be
// decoded, makes Lambda retry the whole batch.
func (f *BatchFunction) Handle(ctx context.Context, ev events.KafkaEvent) (EventResponse, error) {
	now := time.Now()
	member := "lambda"
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		member = lc.AwsRequestID
	}
	parts := make([]string, 0, len(ev.Records))
	for p := range ev.Records {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	msgs := make([][]*broker.Message, len(parts))
	for i, p := range parts {
		rs := slices.Clone(ev.Records[p])
		slices.SortStableFunc(rs, func(a, b events.KafkaRecord) int { return cmp.Compare(a.Offset, b.Offset) })
		for j := range rs {
			m, err := kafkaMessage(&rs[j], now)
			if err != nil {
				return EventResponse{}, err
			}
			msgs[i] = append(msgs[i], m)
		}
	}
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-f.cfg.DeadlineMargin))
		defer cancel()
	}
	back := make([]*BatchItemFailure, len(parts))
	sem := make(chan struct{}, f.cfg.Concurrency)
	var wg sync.WaitGroup
	for i := range parts {
		if len(msgs[i]) == 0 {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			back[i] = f.partition(ctx, member, msgs[i])
		})
	}
	wg.Wait()
	var resp EventResponse
	for _, b := range back {
		if b != nil {
			resp.BatchItemFailures = append(resp.BatchItemFailures, *b)
		}
	}
	return resp, nil
}

// partition runs one partition's records and returns the first not
// committed, if any.
func (f *BatchFunction) partition(ctx context.Context, member string, msgs []*broker.Message) *BatchItemFailure {
	o := msgs[0].Origin
	p := batch.Partition{Group: f.group, Topic: o.Destination, Partition: o.Partition}
	lease, err := f.r.Acquire(ctx, p, member)
	if err != nil {
		f.cfg.Logger.Warn("kafkalambda: taking the partition's offset row failed; its records come back", "partition", p.String(), "error", err.Error())
		return failureAt(msgs[0])
	}
	feed := &lambdaFeed{ch: make(chan *broker.Message, len(msgs)), next: lease.Next, dl: f.cfg.DeadLetter}
	for _, m := range msgs {
		feed.ch <- m
	}
	close(feed.ch)
	if err := f.r.Run(ctx, lease, feed); err != nil {
		f.cfg.Logger.Warn("kafkalambda: the partition's records did not all commit; the rest come back", "partition", p.String(), "error", err.Error())
	}
	for _, m := range msgs {
		if m.Origin.Offset >= feed.next {
			return failureAt(m)
		}
	}
	return nil
}

func failureAt(m *broker.Message) *BatchItemFailure {
	o := m.Origin
	return &BatchItemFailure{ItemIdentifier: ItemIdentifier{Partition: o.Destination + "-" + strconv.FormatInt(int64(o.Partition), 10), Offset: o.Offset}}
}

// lambdaFeed is one partition's records of an event, as a batch.Feed.
type lambdaFeed struct {
	ch chan *broker.Message
	// next is the next offset the Store holds for the partition (-1:
	// none yet), as the Runner's commits move it. Only the Runner's
	// goroutine writes it; it is read after Run returned.
	next int64
	dl   func(ctx context.Context, m *broker.Message, reason string) error
}

func (l *lambdaFeed) Records() <-chan *broker.Message { return l.ch }

func (l *lambdaFeed) DeadLetter(ctx context.Context, m *broker.Message, reason string) error {
	if l.dl == nil {
		return fmt.Errorf("kafkalambda: %s: no dead-letter destination (WithDeadLetters): the record comes back", m.ID)
	}
	return l.dl(ctx, m, reason)
}

// CommitGroup records the Store's next offset: Lambda's event source
// mapping commits the group's offset itself, from the function's answer.
func (l *lambdaFeed) CommitGroup(_ context.Context, next int64) error {
	l.next = next
	return nil
}
