package kafkalambda_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/lambda/kafkalambda"
)

// A Kafka function, called here as the Lambda runtime would call it (in a
// deployed function: lambda.Start(f.Handle), over a DynamoDB store). On
// partition 0 a producer's retried send is a duplicate; on partition 1 the
// second record fails for now, so Lambda resumes that partition there and
// the record after it waits.
func ExampleNew() {
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		if string(m.Body) == "fails" {
			return consumer.Result{}, errors.New("downstream unavailable") // worth retrying
		}
		fmt.Printf("processed %s\n", m.ID)
		return consumer.Result{}, nil
	})
	store, err := memstore.New()
	if err != nil {
		panic(err) // a configuration error
	}
	f, err := kafkalambda.New(store, h, kafkalambda.Concurrency(1))
	if err != nil {
		panic(err) // a configuration error
	}
	rec := func(partition, offset int64, key, value string) events.KafkaRecord {
		return events.KafkaRecord{Topic: "orders", Partition: partition, Offset: offset,
			Key: base64.StdEncoding.EncodeToString([]byte(key)), Value: base64.StdEncoding.EncodeToString([]byte(value))}
	}
	ev := events.KafkaEvent{EventSource: "aws:kafka", Records: map[string][]events.KafkaRecord{
		"orders-0": {rec(0, 10, "o-1", "order 1"), rec(0, 11, "o-1", "order 1")},
		"orders-1": {rec(1, 20, "o-2", "order 2"), rec(1, 21, "o-3", "fails"), rec(1, 22, "o-4", "order 4")},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := f.Handle(ctx, ev)
	if err != nil {
		panic(err)
	}
	for _, r := range resp.BatchItemFailures {
		fmt.Printf("resume %s at %d\n", r.ItemIdentifier.Partition, r.ItemIdentifier.Offset)
	}
	// Output:
	// processed orders/0/10
	// processed orders/1/20
	// resume orders-1 at 21
}
