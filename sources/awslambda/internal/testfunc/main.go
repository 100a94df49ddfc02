// Command testfunc is the Lambda function the tests of package awslambda
// run under the runtime interface emulator. Its configuration comes from
// the environment (TESTFUNC_*); each record's body says what to do:
//
//	{"id": "o1"}                 add one to the effects row o1, in the
//	                             transaction of the COMPLETED record
//	{"id": "o1", "poison": true} fail for good (dead letter)
//	{"id": "o1", "fail": true}   fail, to be retried
//	{"id": "o1", "sleep_first_ms": n}
//	                             on its first delivery, sleep n ms first,
//	                             ignoring the context (Kafka: the first
//	                             time the handler sees it)
//
// TESTFUNC_MODE=plain runs the same effect without onceq (the benchmark's
// baseline).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/sources/awslambda"
)

type body struct {
	ID      string `json:"id"`
	Poison  bool   `json:"poison"`
	Fail    bool   `json:"fail"`
	SleepMS int    `json:"sleep_first_ms"`
}

func main() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx,
		config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")),
		config.WithHTTPClient(awshttp.NewBuildableClient()),
	)
	if err != nil {
		log.Fatal(err)
	}
	db := ddb.NewFromConfig(cfg, func(o *ddb.Options) { o.BaseEndpoint = aws.String(os.Getenv("TESTFUNC_DDB_ENDPOINT")) })
	effects := os.Getenv("TESTFUNC_EFFECTS")

	if os.Getenv("TESTFUNC_MODE") == "plain" {
		lambda.Start(func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			for _, r := range ev.Records {
				var b body
				_ = json.Unmarshal([]byte(r.Body), &b)
				_, err := db.UpdateItem(ctx, effect(effects, b.ID).asUpdateItem())
				if err != nil {
					return events.SQSEventResponse{}, err
				}
			}
			return events.SQSEventResponse{}, nil
		})
		return
	}

	store, err := dynamostore.New(db, os.Getenv("TESTFUNC_TABLE"))
	if err != nil {
		log.Fatal(err)
	}
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		var b body
		if err := json.Unmarshal(m.Body, &b); err != nil || b.ID == "" {
			return consumer.Result{}, consumer.Permanent(errors.New("not a test body"))
		}
		if b.SleepMS > 0 && firstDelivery(ctx, db, effects, m, b.ID) {
			time.Sleep(time.Duration(b.SleepMS) * time.Millisecond)
		}
		switch {
		case b.Poison:
			return consumer.Result{}, consumer.Permanent(errors.New("poison record"))
		case b.Fail:
			return consumer.Result{}, errors.New("asked to fail")
		}
		return consumer.Result{Response: []byte(`{"done":"` + b.ID + `"}`), Writes: []any{effect(effects, b.ID).item}}, nil
	})
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	guardOpts := []consumer.GuardOption{consumer.WithLogger(logger)}
	if d, err := time.ParseDuration(os.Getenv("TESTFUNC_SKEW")); err == nil {
		guardOpts = append(guardOpts, consumer.ClockSkewMargin(d))
	}
	if os.Getenv("TESTFUNC_LEASE") != "" {
		d, _ := time.ParseDuration(os.Getenv("TESTFUNC_LEASE"))
		guardOpts = append(guardOpts, consumer.LeaseTTL(d), consumer.HandlerTimeout(d/2))
	}
	opts := []awslambda.Option{awslambda.WithGuardOptions(guardOpts...), awslambda.WithLogger(logger)}
	if n, err := strconv.Atoi(os.Getenv("TESTFUNC_CONCURRENCY")); err == nil {
		opts = append(opts, awslambda.Concurrency(n))
	}

	switch os.Getenv("TESTFUNC_MODE") {
	case "kafka":
		if topic := os.Getenv("TESTFUNC_KAFKA_DLQ"); topic != "" {
			w := &kafkago.Writer{Addr: kafkago.TCP(os.Getenv("TESTFUNC_KAFKA_BROKER")), Topic: topic, RequiredAcks: kafkago.RequireAll}
			opts = append(opts, awslambda.WithDeadLetters(awslambda.KafkaTopic(w)))
		}
		f, err := awslambda.NewKafka(store, h, opts...)
		if err != nil {
			log.Fatal(err)
		}
		lambda.Start(f.Handle)
	default:
		q := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(os.Getenv("TESTFUNC_SQS_ENDPOINT")) })
		if url := os.Getenv("TESTFUNC_DLQ_URL"); url != "" {
			opts = append(opts, awslambda.WithDeadLetters(awslambda.SQSQueue(q, url)))
		}
		if url := os.Getenv("TESTFUNC_QUEUE_URL"); url != "" {
			opts = append(opts, awslambda.WithVisibility(q, url))
		}
		f, err := awslambda.NewSQS(store, h, opts...)
		if err != nil {
			log.Fatal(err)
		}
		lambda.Start(f.Handle)
	}
}

// firstDelivery reports whether this is the record's first delivery: for
// SQS its receive count; Kafka has none, so a marker row in the effects
// table ("first#<id>", without a count) is put on the first one.
func firstDelivery(ctx context.Context, db *ddb.Client, table string, m *consumer.Message, id string) bool {
	if m.Origin.System != "kafka" {
		return m.Deliveries == 1
	}
	_, err := db.PutItem(ctx, &ddb.PutItemInput{
		TableName:           aws.String(table),
		Item:                map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "first#" + id}},
		ConditionExpression: aws.String("attribute_not_exists(id)"),
	})
	return err == nil
}

// effectWrite adds one to the effects row of an id.
type effectWrite struct{ item types.TransactWriteItem }

func effect(table, id string) effectWrite {
	return effectWrite{types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
		UpdateExpression:          aws.String("ADD n :one"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
	}}}
}

func (e effectWrite) asUpdateItem() *ddb.UpdateItemInput {
	u := e.item.Update
	return &ddb.UpdateItemInput{TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
		ExpressionAttributeValues: u.ExpressionAttributeValues}
}
