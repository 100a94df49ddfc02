package sqssource_test

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/sources/sqssource"
)

// A Source over an SQS queue with its dead-letter queue, run by a
// Consumer. The queue's attributes (visibility timeout, retention, redrive
// policy) are read once by New; a malformed message goes to the
// dead-letter queue with its reason, a valid one is deleted only after its
// record is COMPLETED. (It needs a queue, so it is compiled, not run.)
func ExampleNew() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx) // AWS_ENDPOINT_URL_SQS points it at an emulator
	if err != nil {
		log.Fatal(err)
	}
	source, err := sqssource.New(ctx, sqs.NewFromConfig(cfg), os.Getenv("QUEUE_URL"),
		sqssource.DeadLetterQueue(os.Getenv("DLQ_URL")),
		sqssource.Pollers(2)) // two long polls in flight keep 16 workers fed
	if err != nil {
		log.Fatal(err) // a typed error: bad URL, missing queue, denied access
	}
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("ok")}, nil
	})
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	c, err := consumer.New(source, store, h, consumer.Concurrency(16))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
