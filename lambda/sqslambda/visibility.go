package sqslambda

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/lambda/internal/lambdabatch"
)

// VisibilityChanger is the part of *sqs.Client that WithVisibility uses.
type VisibilityChanger interface {
	ChangeMessageVisibilityBatch(ctx context.Context, in *awssqs.ChangeMessageVisibilityBatchInput, opts ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityBatchOutput, error)
}

type visibility struct {
	client VisibilityChanger
	url    string
}

// maxVisibility is SQS's longest visibility timeout.
const maxVisibility = 12 * time.Hour

// changeVisibility sets each reported record that said when it can succeed
// to come back then, ten records per call.
func (f *Function) changeVisibility(ctx context.Context, ev events.SQSEvent, recs []lambdabatch.Record) {
	v := f.visibility
	if v == nil || strings.HasSuffix(v.url, ".fifo") {
		return
	}
	var entries []sqstypes.ChangeMessageVisibilityBatchRequestEntry
	flush := func() {
		if len(entries) == 0 {
			return
		}
		out, err := v.client.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(v.url), Entries: entries})
		switch {
		case err != nil:
			f.r.Logger().WarnContext(ctx, "sqslambda: visibility not changed; records come back after the visibility timeout",
				slog.Int("records", len(entries)), slog.String("error", err.Error()))
		case len(out.Failed) > 0:
			f.r.Logger().WarnContext(ctx, "sqslambda: visibility not changed for some records; they come back after the visibility timeout",
				slog.Int("records", len(out.Failed)), slog.String("first_error", aws.ToString(out.Failed[0].Message)))
		}
		entries = entries[:0]
	}
	for i := range recs {
		if !recs[i].Back || recs[i].RetryAfter <= 0 {
			continue
		}
		// Whole seconds, rounded up: never back before it can succeed.
		secs := int32((min(recs[i].RetryAfter, maxVisibility) + time.Second - 1) / time.Second)
		entries = append(entries, sqstypes.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(ev.Records[i].ReceiptHandle), VisibilityTimeout: secs})
		if len(entries) == 10 {
			flush()
		}
	}
	flush()
}
