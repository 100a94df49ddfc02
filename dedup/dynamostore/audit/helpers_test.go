package audit_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/dynamostore/internal/ddbtest"
	"github.com/onceq/onceq/internal/awstest"
)

// dynamoClient is a client of DynamoDB Local at endpoint.
func dynamoClient(t testing.TB, endpoint string) *ddb.Client {
	t.Helper()
	return ddb.NewFromConfig(awstest.Config(t, endpoint), func(o *ddb.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

func uniqueName(prefix string) string { return ddbtest.UniqueName(prefix) }

func uniqueKey(testing.TB) string { return ddbtest.UniqueKey() }

func recordsTable(t testing.TB, client *ddb.Client, opts ...dynamostore.TableOption) string {
	t.Helper()
	return ddbtest.RecordsTable(t, client, opts...)
}

func newStore(t testing.TB, client *ddb.Client, table string, opts ...dynamostore.Option) *dynamostore.Store {
	t.Helper()
	return ddbtest.NewStore(t, client, table, opts...)
}

func mustClaim(t testing.TB, st dedup.Store, req dedup.ClaimRequest) dedup.Claim {
	t.Helper()
	return ddbtest.MustClaim(t, st, req)
}
