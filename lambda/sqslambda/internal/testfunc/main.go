// Command testfunc is the Lambda function the tests of package sqslambda
// run under the runtime interface emulator. Its configuration comes from
// the environment (TESTFUNC_*; testfn.Env says what each
// record's body asks for); TESTFUNC_MODE=plain runs the same effect
// without onceq (the benchmark's baseline).
package main

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/onceq/onceq/internal/lambdatest/testfn"
	"github.com/onceq/onceq/lambda/sqslambda"
)

func main() {
	ctx := context.Background()
	e := testfn.Load(ctx)
	if os.Getenv("TESTFUNC_MODE") == "plain" {
		lambda.Start(func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			for _, r := range ev.Records {
				if err := e.Plain(ctx, []byte(r.Body)); err != nil {
					return events.SQSEventResponse{}, err
				}
			}
			return events.SQSEventResponse{}, nil
		})
		return
	}
	opts := []sqslambda.Option{sqslambda.WithGuardOptions(e.GuardOptions()...), sqslambda.WithLogger(e.Logger)}
	if e.Concurrency > 0 {
		opts = append(opts, sqslambda.Concurrency(e.Concurrency))
	}
	q := awssqs.NewFromConfig(e.AWS, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(os.Getenv("TESTFUNC_SQS_ENDPOINT")) })
	if url := os.Getenv("TESTFUNC_DLQ_URL"); url != "" {
		opts = append(opts, sqslambda.DeadLetterQueue(q, url))
	}
	if url := os.Getenv("TESTFUNC_QUEUE_URL"); url != "" {
		opts = append(opts, sqslambda.WithVisibility(q, url))
	}
	f, err := sqslambda.New(e.Store(), e.Handler(), opts...)
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(f.Handle)
}
