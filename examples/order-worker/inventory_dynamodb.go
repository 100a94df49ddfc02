package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
)

// dynamoInventory reserves stock in DynamoDB tables. Its writes are
// TransactWriteItems entries that dedup/dynamostore commits in the same
// transaction as the COMPLETED record.
type dynamoInventory struct {
	client                 *ddb.Client
	inventory, ordersTable string
	now                    func() time.Time
}

// Reserve updates the sku's item and puts the order row. A ConditionExpression
// cannot do arithmetic, so the item keeps both numbers and the condition
// reads available alone; there is no other guard, so a double application
// would show as over-reservation.
func (d *dynamoInventory) Reserve(o Order) []dedup.Write {
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
			TableName: aws.String(d.ordersTable),
			Item: map[string]types.AttributeValue{
				"order_id":    &types.AttributeValueMemberS{Value: o.OrderID},
				"sku":         &types.AttributeValueMemberS{Value: o.SKU},
				"qty":         qty,
				"reserved_at": &types.AttributeValueMemberS{Value: d.now().UTC().Format(time.RFC3339Nano)},
			},
		}},
	}
}

// createExampleTables creates the inventory and orders tables when missing
// (on-demand) and seeds skus sku-0 … sku-{skus-1} where absent.
func createExampleTables(ctx context.Context, client *ddb.Client, inventory, orders string, skus int, available int64) error {
	for _, t := range []struct{ name, key string }{{inventory, "sku"}, {orders, "order_id"}} {
		if err := createDynamoTable(ctx, client, t.name, t.key); err != nil {
			return err
		}
	}
	for i := range skus {
		_, err := client.PutItem(ctx, &ddb.PutItemInput{
			TableName: aws.String(inventory),
			Item: map[string]types.AttributeValue{
				"sku":       &types.AttributeValueMemberS{Value: fmt.Sprintf("sku-%d", i)},
				"available": &types.AttributeValueMemberN{Value: strconv.FormatInt(available, 10)},
				"reserved":  &types.AttributeValueMemberN{Value: "0"},
			},
			ConditionExpression: aws.String("attribute_not_exists(sku)"),
		})
		var exists *types.ConditionalCheckFailedException
		if err != nil && !errors.As(err, &exists) {
			return fmt.Errorf("seed %s: %w", inventory, err)
		}
	}
	return nil
}

// createDynamoTable creates a table keyed by the string attribute key,
// unless it exists, and waits until it is active.
func createDynamoTable(ctx context.Context, client *ddb.Client, name, key string) error {
	_, err := client.CreateTable(ctx, &ddb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(key), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(key), KeyType: types.KeyTypeHash}},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	if err := ddb.NewTableExistsWaiter(client).Wait(ctx, &ddb.DescribeTableInput{TableName: aws.String(name)}, 2*time.Minute); err != nil {
		return fmt.Errorf("wait for table %s: %w", name, err)
	}
	return nil
}

// dynamoTotals reads reserved units and order rows (for tests and the
// summary's cross-check).
func dynamoTotals(ctx context.Context, client *ddb.Client, inventory, orders string) (reserved int64, rows int, err error) {
	p := ddb.NewScanPaginator(client, &ddb.ScanInput{TableName: aws.String(inventory), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, 0, err
		}
		for _, it := range page.Items {
			if n, ok := it["reserved"].(*types.AttributeValueMemberN); ok {
				v, _ := strconv.ParseInt(n.Value, 10, 64)
				reserved += v
			}
		}
	}
	op := ddb.NewScanPaginator(client, &ddb.ScanInput{TableName: aws.String(orders), ConsistentRead: aws.Bool(true), Select: types.SelectCount})
	for op.HasMorePages() {
		page, err := op.NextPage(ctx)
		if err != nil {
			return 0, 0, err
		}
		rows += int(page.Count)
	}
	return reserved, rows, nil
}
