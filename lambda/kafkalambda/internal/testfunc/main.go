// Command testfunc is the Lambda function the tests of package kafkalambda
// run under the runtime interface emulator. Its configuration comes from
// the environment (TESTFUNC_*; testfn.Env says what each
// record's body asks for); TESTFUNC_KAFKA_BROKER and TESTFUNC_KAFKA_DLQ
// name the dead-letter topic.
package main

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/internal/lambdatest/testfn"
	"github.com/onceq/onceq/lambda/kafkalambda"
)

func main() {
	e := testfn.Load(context.Background())
	opts := []kafkalambda.Option{kafkalambda.WithGuardOptions(e.GuardOptions()...), kafkalambda.WithLogger(e.Logger)}
	if e.Concurrency > 0 {
		opts = append(opts, kafkalambda.Concurrency(e.Concurrency))
	}
	if topic := os.Getenv("TESTFUNC_KAFKA_DLQ"); topic != "" {
		w := &kafkago.Writer{Addr: kafkago.TCP(os.Getenv("TESTFUNC_KAFKA_BROKER")), Topic: topic, RequiredAcks: kafkago.RequireAll}
		opts = append(opts, kafkalambda.DeadLetterTopic(w))
	}
	f, err := kafkalambda.New(e.Store(), e.Handler(), opts...)
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(f.Handle)
}
