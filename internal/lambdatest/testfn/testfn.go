// Package testfn is the handler of the Lambda test functions (each handler
// package's internal/testfunc), which the tests of lambda/sqslambda and
// lambda/kafkalambda run under the emulator (package lambdatest). It is
// apart from lambdatest so that a test function, a program, links neither
// package testing nor the test harness.
package testfn

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
)

// Env is what a test function (each handler package's
// internal/testfunc) reads from its environment (TESTFUNC_*), and the
// store and handler made from it. Each record's body says what to do:
//
//	{"id": "o1"}                 add one to the effects row o1, in the
//	                             transaction of the COMPLETED record
//	{"id": "o1", "poison": true} fail for good (dead letter)
//	{"id": "o1", "fail": true}   fail, to be retried
//	{"id": "o1", "sleep_first_ms": n}
//	                             on its first delivery, sleep n ms first,
//	                             ignoring the context (Kafka: the first
//	                             time the handler sees it)
type Env struct {
	AWS     aws.Config
	DB      *ddb.Client
	Effects string // the effects table
	Logger  *slog.Logger
	// Concurrency is TESTFUNC_CONCURRENCY, 0 when unset.
	Concurrency int
}

// Load reads the environment; a test function stops on an error.
func Load(ctx context.Context) Env {
	cfg, err := config.LoadDefaultConfig(ctx,
		config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")),
		config.WithHTTPClient(awshttp.NewBuildableClient()),
	)
	if err != nil {
		log.Fatal(err)
	}
	e := Env{
		AWS:     cfg,
		DB:      ddb.NewFromConfig(cfg, func(o *ddb.Options) { o.BaseEndpoint = aws.String(os.Getenv("TESTFUNC_DDB_ENDPOINT")) }),
		Effects: os.Getenv("TESTFUNC_EFFECTS"),
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	e.Concurrency, _ = strconv.Atoi(os.Getenv("TESTFUNC_CONCURRENCY"))
	return e
}

// Store is the idempotency table's store.
func (e Env) Store() *dynamostore.Store {
	store, err := dynamostore.New(e.DB, dynamostore.WithTable(os.Getenv("TESTFUNC_TABLE")))
	if err != nil {
		log.Fatal(err)
	}
	return store
}

// GuardOptions are the Guard's options the environment asks for.
func (e Env) GuardOptions() []consumer.GuardOption {
	opts := []consumer.GuardOption{consumer.WithLogger(e.Logger)}
	if d, err := time.ParseDuration(os.Getenv("TESTFUNC_SKEW")); err == nil {
		opts = append(opts, consumer.ClockSkewMargin(d))
	}
	if os.Getenv("TESTFUNC_LEASE") != "" {
		d, _ := time.ParseDuration(os.Getenv("TESTFUNC_LEASE"))
		opts = append(opts, consumer.LeaseTTL(d), consumer.HandlerTimeout(d/2))
	}
	return opts
}

type body struct {
	ID      string `json:"id"`
	Poison  bool   `json:"poison"`
	Fail    bool   `json:"fail"`
	SleepMS int    `json:"sleep_first_ms"`
}

// Handler does what each record's body says.
func (e Env) Handler() consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		var b body
		if err := json.Unmarshal(m.Body, &b); err != nil || b.ID == "" {
			return consumer.Result{}, consumer.Permanent(errors.New("not a test body"))
		}
		if b.SleepMS > 0 && e.firstDelivery(ctx, m, b.ID) {
			time.Sleep(time.Duration(b.SleepMS) * time.Millisecond) // ignoring the context, as a stuck handler would
		}
		switch {
		case b.Poison:
			return consumer.Result{}, consumer.Permanent(errors.New("poison record"))
		case b.Fail:
			return consumer.Result{}, errors.New("asked to fail")
		}
		return consumer.Result{Response: []byte(`{"done":"` + b.ID + `"}`), Writes: []dedup.Write{effect(e.Effects, b.ID)}}, nil
	})
}

// Plain applies the effect of a body without onceq (the benchmark's
// baseline).
func (e Env) Plain(ctx context.Context, recordBody []byte) error {
	var b body
	_ = json.Unmarshal(recordBody, &b)
	u := effect(e.Effects, b.ID).Update
	_, err := e.DB.UpdateItem(ctx, &ddb.UpdateItemInput{TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
		ExpressionAttributeValues: u.ExpressionAttributeValues})
	return err
}

// firstDelivery reports whether this is the record's first delivery: for
// SQS its receive count; Kafka has none, so a marker row in the effects
// table ("first#<id>", without a count) is put on the first one.
func (e Env) firstDelivery(ctx context.Context, m *consumer.Message, id string) bool {
	if m.Origin.System != "kafka" {
		return m.Deliveries == 1
	}
	_, err := e.DB.PutItem(ctx, &ddb.PutItemInput{
		TableName:           aws.String(e.Effects),
		Item:                map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "first#" + id}},
		ConditionExpression: aws.String("attribute_not_exists(id)"),
	})
	return err == nil
}

// effect adds one to the effects row of an id.
func effect(table, id string) dynamostore.Write {
	return dynamostore.Write{Update: &types.Update{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
		UpdateExpression:          aws.String("ADD n :one"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
	}}
}
