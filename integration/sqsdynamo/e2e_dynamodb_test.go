package sqsdynamo_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// SQS → consumer → DynamoDB Local: every effect is an ADD to a counter item
// in the same transaction as the COMPLETED record, so a doubled effect
// would show as a counter of 2.
func TestEndToEndDynamoDBStore(t *testing.T) {
	t.Parallel()
	ep := testenv.DynamoDBEndpoint(t)
	db := ddb.NewFromConfig(awstest.Config(t, ep), func(o *ddb.Options) { o.BaseEndpoint = aws.String(ep) })
	ctx := context.Background()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	idem, effects := "e2e_idem_"+suffix, "e2e_effects_"+suffix
	if err := dynamostore.CreateTable(ctx, db, idem); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateTable(ctx, &ddb.CreateTableInput{TableName: aws.String(effects), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("k"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("k"), KeyType: types.KeyTypeHash}}}); err != nil {
		t.Fatal(err)
	}

	c := client(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	const total, dups = 5000, 1250
	const unique = total - dups
	msgs := withDuplicateSends(unique, dups, 7)
	if err := sendBatch(ctx, c, url, false, msgs); err != nil {
		t.Fatal(err)
	}
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Writes: []dedup.Write{dynamostore.Write{Update: &types.Update{
			TableName:                 aws.String(effects),
			Key:                       map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: m.Attributes[consumer.IdempotencyKeyAttribute]}},
			UpdateExpression:          aws.String("ADD applied :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		}}}}, nil
	})
	seen := &outcomes{}
	store, err := dynamostore.New(db, dynamostore.WithTable(idem))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := consumer.New(newSource(t, c, url), store, h, consumer.WithoutDeadLetters(), consumer.Concurrency(16),
		consumer.WithHooks(seen), consumer.PendingRecheck(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runUntilSettled(t, cons, seen, total, 300*time.Second)

	applied := map[string]int{}
	p := ddb.NewScanPaginator(db, &ddb.ScanInput{TableName: aws.String(effects), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			n, _ := strconv.Atoi(it["applied"].(*types.AttributeValueMemberN).Value)
			applied[it["k"].(*types.AttributeValueMemberS).Value] = n
		}
	}
	if len(applied) != unique {
		t.Errorf("%d keys took effect, want %d", len(applied), unique)
	}
	for k, n := range applied {
		if n != 1 {
			t.Errorf("key %s took effect %d times", k, n)
		}
	}
	if vis, inflight := depth(t, c, url); vis != 0 || inflight != 0 {
		t.Errorf("queue not empty at the end: %d visible, %d in flight", vis, inflight)
	}
}
