package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/lambdatest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

func TestOrderKey(t *testing.T) {
	k, err := orderKey(&consumer.Message{Body: []byte(`{"order_id":"o1","sku":"s","qty":1}`)})
	if err != nil || k != "o1" {
		t.Errorf("key %q, %v; want the order ID", k, err)
	}
	k, _ = orderKey(&consumer.Message{Body: []byte(`{"order_id":"o1","sku":"s","qty":1}`),
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "attr"}})
	if k != "attr" {
		t.Errorf("key %q; want the idempotency-key attribute", k)
	}
	for _, body := range []string{`not json`, `{"order_id":"o1","sku":"s","qty":0}`, `{"sku":"s","qty":1}`, `{"order_id":"o1","sku":"s","qty":1} x`} {
		if _, err := parseOrder([]byte(body)); err == nil {
			t.Errorf("%s: accepted", body)
		}
	}
}

// TestUnderEmulator runs docs/lambda.md's walk-through: the function under
// the runtime interface emulator against DynamoDB Local; a duplicate in
// the batch reserves nothing more, and a malformed order is kept.
func TestUnderEmulator(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bootstrap")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx := testenv.Context(t, time.Minute)
	client := ddb.NewFromConfig(awstest.Config(t, ep))
	suffix := fmt.Sprint(time.Now().UnixNano())
	idem, inv, orders := "lo-idem-"+suffix, "lo-inv-"+suffix, "lo-orders-"+suffix
	if err := dynamostore.CreateTable(ctx, client, idem); err != nil {
		t.Fatal(err)
	}
	for _, tb := range []struct{ name, key string }{{inv, "sku"}, {orders, "order_id"}} {
		if _, err := client.CreateTable(ctx, &ddb.CreateTableInput{TableName: aws.String(tb.name), BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(tb.key), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(tb.key), KeyType: types.KeyTypeHash}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.PutItem(ctx, &ddb.PutItemInput{TableName: aws.String(inv), Item: map[string]types.AttributeValue{
		"sku": &types.AttributeValueMemberS{Value: "sku-1"}, "available": &types.AttributeValueMemberN{Value: "10"},
		"reserved": &types.AttributeValueMemberN{Value: "0"}}}); err != nil {
		t.Fatal(err)
	}

	fn := lambdatest.Start(t, bin, 30, map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": ep,
		"AWS_REGION": testenv.Region, "AWS_ACCESS_KEY_ID": testenv.AccessKeyID, "AWS_SECRET_ACCESS_KEY": testenv.SecretAccessKey,
		"ONCEQ_TABLE": idem, "INVENTORY_TABLE": inv, "ORDERS_TABLE": orders})

	order := `{"order_id":"o1","sku":"sku-1","qty":2}`
	ev := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: order, EventSourceARN: "arn:aws:sqs:us-east-1:1:orders"},
		{MessageId: "m2", Body: order, EventSourceARN: "arn:aws:sqs:us-east-1:1:orders"},
		{MessageId: "m3", Body: "not json", EventSourceARN: "arn:aws:sqs:us-east-1:1:orders"},
	}}
	for range 2 {
		if got := fn.Invoke(ctx, ev); string(got.Body) != `{"batchItemFailures":[{"itemIdentifier":"m3"}]}` {
			t.Fatalf("answer %s; want only the malformed m3 kept", got.Body)
		}
	}
	out, err := client.GetItem(ctx, &ddb.GetItemInput{TableName: aws.String(inv), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: "sku-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := out.Item["reserved"].(*types.AttributeValueMemberN).Value; r != "2" {
		t.Errorf("reserved %s, want 2: the order reserved once", r)
	}
}
