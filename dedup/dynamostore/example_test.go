package dynamostore_test

import (
	"context"
	"log"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
)

// The DynamoDB store over a table made by CreateTable (or `onceq
// create-table`). A handler's business writes are TransactWriteItems: the
// store commits them in one transaction with the COMPLETED record. (It
// needs DynamoDB, so it is compiled, not run.)
func ExampleNew() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx) // AWS_ENDPOINT_URL_DYNAMODB points it at DynamoDB Local
	if err != nil {
		log.Fatal(err)
	}
	client := dynamodb.NewFromConfig(cfg)
	// Idempotent: an existing table of the right layout is left as it is.
	if err := dynamostore.CreateTable(ctx, client, "onceq_idempotency"); err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(client, dynamostore.WithTable("onceq_idempotency"))
	if err != nil {
		log.Fatal(err)
	}
	// A guard (or a Consumer) over the store; this handler adds an order's
	// quantity to its SKU's total, exactly once per order.
	guard, err := consumer.NewGuard(store, consumer.HandlerFunc(
		func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
			add := dynamostore.Write{Update: &types.Update{
				TableName:                 aws.String("sku_totals"),
				Key:                       map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: m.Attributes["sku"]}},
				UpdateExpression:          aws.String("ADD ordered :q"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":q": &types.AttributeValueMemberN{Value: strconv.Itoa(1)}},
			}}
			return consumer.Result{Response: []byte("counted"), Writes: []dedup.Write{add}}, nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	o := guard.Process(ctx, &consumer.Message{ID: "m-1", Body: []byte("order o-1"),
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "o-1", "sku": "sku-1"}})
	log.Println(o.Kind, o.Action())
}
