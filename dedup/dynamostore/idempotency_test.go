package dynamostore_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/idempotency/idemtest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// The Idempotency-Key middleware over DynamoDB, the handler's payment
// item updated in the TransactWriteItems that writes COMPLETED.
func TestIdempotencyKey(t *testing.T) {
	c := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	table := recordsTable(t, c)
	inv := newInventory(t, c) // a table keyed by "sku": the payments' ids here
	idemtest.Run(t, func(t *testing.T) dedup.Store { return newStore(t, c, table) }, idemtest.Options{
		Effect: func(*testing.T, dedup.Store) idemtest.Effect { return paymentEffect(c, inv.table) },
	})
}

// paymentEffect counts each payment's applications in table, an item per
// payment keyed by "sku".
func paymentEffect(c *ddb.Client, table string) idemtest.Effect {
	return idemtest.Effect{
		Write: func(id string) dedup.Write {
			return dynamostore.Write{Update: &types.Update{
				TableName:                 aws.String(table),
				Key:                       map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: id}},
				UpdateExpression:          aws.String("ADD applied :one"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
			}}
		},
		Count: func(t *testing.T, id string) int {
			out, err := c.GetItem(t.Context(), &ddb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: id}}})
			if err != nil {
				t.Fatal(err)
			}
			v, ok := out.Item["applied"].(*types.AttributeValueMemberN)
			if !ok {
				return 0
			}
			n, _ := strconv.Atoi(v.Value)
			return n
		},
	}
}

// A server killed with SIGKILL mid-request, then restarted: the retry
// applies the payment once.
func TestIdempotencyKeyServerKilled(t *testing.T) {
	client := func(t *testing.T) *ddb.Client { return dynamoClient(t, testenv.DynamoDBEndpoint(t), nil) }
	idemtest.RunKilled(t, idemtest.Killed{
		Setup: func(t *testing.T) {
			c := client(t)
			t.Setenv("ONCEQ_IDEMTEST_RECORDS", recordsTable(t, c))
			t.Setenv("ONCEQ_IDEMTEST_PAYMENTS", newInventory(t, c).table)
		},
		Store: func(t *testing.T) dedup.Store { return newStore(t, client(t), os.Getenv("ONCEQ_IDEMTEST_RECORDS")) },
		Effect: func(t *testing.T, _ dedup.Store) idemtest.Effect {
			return paymentEffect(client(t), os.Getenv("ONCEQ_IDEMTEST_PAYMENTS"))
		},
	})
}
