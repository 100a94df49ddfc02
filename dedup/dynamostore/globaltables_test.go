package dynamostore_test

import (
	"strings"
	"testing"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testenv"
)

// twoRegions are clients of two DynamoDB Local instances standing in for
// two regions of a Global Table (they do not replicate).
func twoRegions(t *testing.T) (east, west *ddb.Client) {
	t.Helper()
	east = dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	west = dynamoClient(t, testenv.DynamoDB2Endpoint(t), nil)
	return east, west
}

// Check probes every regional client: a table present in both regions
// passes; one missing from the second region fails Check, naming that
// client, where only the first used to be checked.
func TestCheckProbesEveryRegion(t *testing.T) {
	east, west := twoRegions(t)
	table := recordsTable(t, east)
	st := newStore(t, nil, table, dynamostore.WithRegionalClients([]*ddb.Client{east, west}))
	err := st.Check(t.Context())
	if err == nil || !strings.Contains(err.Error(), "regional client 1") || !strings.Contains(err.Error(), table) {
		t.Fatalf("Check with the table missing from the second region: %v, want an error naming regional client 1 and the table", err)
	}
	if err := dynamostore.CreateTable(t.Context(), west, table); err != nil {
		t.Fatal(err)
	}
	if err := st.Check(t.Context()); err != nil {
		t.Fatalf("Check with the table in both regions: %v", err)
	}
}
