// Command lambda-order is the order worker as an AWS Lambda function: an
// SQS event source mapping delivers orders in batches, and each order
// reserves stock exactly once, with the same DynamoDB transaction as
// examples/order-worker (the inventory update and the orders row commit
// together with the COMPLETED record).
//
// Configuration, from the function's environment:
//
//	ONCEQ_TABLE        idempotency table (default onceq_idempotency)
//	INVENTORY_TABLE    inventory table, key "sku" (default onceq_inventory)
//	ORDERS_TABLE       orders table, key "order_id" (default onceq_orders)
//	DLQ_URL            dead-letter queue for malformed orders (optional:
//	                   without it they are reported and stay on the queue
//	                   until its redrive policy moves them)
//
// The AWS SDK reads the usual variables too; AWS_ENDPOINT_URL_DYNAMODB and
// AWS_ENDPOINT_URL_SQS point it at local servers.
//
// Build for Lambda's provided.al2023 runtime:
//
//	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc -o bootstrap ./examples/lambda-order
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/lambda/sqslambda"
)

// Order is the message body.
type Order struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
	Qty     int64  `json:"qty"`
}

var (
	reservedResponse = []byte(`{"status":"reserved"}`)
	rejectedResponse = []byte(`{"status":"rejected"}`)
)

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	f, err := newFunction(context.Background(), logger)
	if err != nil {
		log.Fatal(err) // a configuration error: the function fails to start, visibly
	}
	lambda.Start(f.Handle)
}

func newFunction(ctx context.Context, logger *slog.Logger) (*sqslambda.Function, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithHTTPClient(awshttp.NewBuildableClient()))
	if err != nil {
		return nil, err
	}
	client := ddb.NewFromConfig(cfg)
	store, err := dynamostore.New(client, dynamostore.WithTable(env("ONCEQ_TABLE", "onceq_idempotency")))
	if err != nil {
		return nil, err
	}
	inv := inventory{inventory: env("INVENTORY_TABLE", "onceq_inventory"), orders: env("ORDERS_TABLE", "onceq_orders")}
	opts := []sqslambda.Option{
		sqslambda.WithLogger(logger),
		sqslambda.WithGuardOptions(
			consumer.WithLogger(logger),
			consumer.WithKeyFunc(orderKey), // as the order worker: moving between them reprocesses nothing
			consumer.HandlerTimeout(10*time.Second),
			consumer.LeaseTTL(15*time.Second),
		),
	}
	if url := os.Getenv("DLQ_URL"); url != "" {
		opts = append(opts, sqslambda.DeadLetterQueue(awssqs.NewFromConfig(cfg), url))
	}
	return sqslambda.New(store, reserveHandler(inv), opts...)
}

// reserveHandler reserves stock for each order, exactly once: the
// reservation is the Result's Writes, committed with the COMPLETED record.
// An order out of stock is Rejected, and that answer is cached too.
func reserveHandler(inv inventory) consumer.Handler {
	return consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		o, err := parseOrder(m.Body)
		if err != nil {
			return consumer.Result{}, consumer.Permanent(err) // dead-lettered, never retried
		}
		return consumer.Result{Response: reservedResponse, Writes: inv.reserve(o), RejectResponse: rejectedResponse}, nil
	})
}

// orderKey is the idempotency key: the idempotency-key attribute when
// present, else the order ID.
func orderKey(m *consumer.Message) (string, error) {
	if k, ok := m.Attributes[consumer.IdempotencyKeyAttribute]; ok {
		return k, nil
	}
	o, err := parseOrder(m.Body)
	if err != nil {
		return "", err
	}
	return o.OrderID, nil
}

var errMalformed = errors.New("malformed order")

func parseOrder(body []byte) (Order, error) {
	var o Order
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&o); err != nil {
		return o, fmt.Errorf("%w: %v", errMalformed, err)
	}
	switch {
	case dec.More():
		return o, fmt.Errorf("%w: trailing data", errMalformed)
	case o.OrderID == "" || o.SKU == "":
		return o, fmt.Errorf("%w: order_id and sku are required", errMalformed)
	case o.Qty <= 0:
		return o, fmt.Errorf("%w: qty %d must be positive", errMalformed, o.Qty)
	}
	return o, nil
}

// inventory builds the order worker's reservation: the sku's stock moves
// from available to reserved (refused by its condition when short), and
// the order's row is put, in the transaction of the COMPLETED record.
type inventory struct{ inventory, orders string }

func (d inventory) reserve(o Order) []dedup.Write {
	qty := &types.AttributeValueMemberN{Value: strconv.FormatInt(o.Qty, 10)}
	return []dedup.Write{
		dynamostore.Write{Update: &types.Update{
			TableName:                 aws.String(d.inventory),
			Key:                       map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: o.SKU}},
			UpdateExpression:          aws.String("SET available = available - :q, reserved = reserved + :q"),
			ConditionExpression:       aws.String("available >= :q"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":q": qty},
		}},
		dynamostore.Write{Put: &types.Put{
			TableName: aws.String(d.orders),
			Item: map[string]types.AttributeValue{
				"order_id":    &types.AttributeValueMemberS{Value: o.OrderID},
				"sku":         &types.AttributeValueMemberS{Value: o.SKU},
				"qty":         qty,
				"reserved_at": &types.AttributeValueMemberS{Value: time.Now().UTC().Format(time.RFC3339Nano)},
			},
		}},
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
