package dynamostore_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/retry"
)

// Check tells a configuration fault before the first claim: a missing
// table and a table of the other layout are Misconfigured errors, a table
// without TTL works but is logged, a good table passes in silence.
func TestCheck(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	var logs testenv.LogBuffer
	logger := logs.Logger(slog.LevelInfo)
	plain := recordsTable(t, client)
	tenant := recordsTable(t, client, dynamostore.TenantLayout())

	if err := newStore(t, client, plain, dynamostore.WithLogger(logger)).Check(t.Context()); err != nil {
		t.Fatalf("good table: %v", err)
	}
	if err := newStore(t, client, tenant, dynamostore.TenantLayout(), dynamostore.WithLogger(logger)).Check(t.Context()); err != nil {
		t.Fatalf("good tenant table: %v", err)
	}
	if logs.String() != "" {
		t.Fatalf("good tables logged:\n%s", logs.String())
	}

	err := newStore(t, client, uniqueName("onceq_missing_")).Check(t.Context())
	if err == nil || retry.Classify(err) != retry.Misconfigured {
		t.Fatalf("missing table: %v (class %v), want Misconfigured", err, retry.Classify(err))
	}
	for name, st := range map[string]*dynamostore.Store{
		"tenant table, default layout": newStore(t, client, tenant),
		"default table, tenant layout": newStore(t, client, plain, dynamostore.TenantLayout()),
	} {
		err := st.Check(t.Context())
		var le *dynamostore.LayoutError
		if !errors.As(err, &le) || retry.Classify(err) != retry.Misconfigured {
			t.Fatalf("%s: %v, want a Misconfigured *LayoutError", name, err)
		}
	}

	// A table made by hand, without TTL.
	noTTL := uniqueName("onceq_nottl_")
	if _, err := client.CreateTable(t.Context(), &ddb.CreateTableInput{
		TableName:            aws.String(noTTL),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := newStore(t, client, noTTL, dynamostore.WithLogger(logger)).Check(t.Context()); err != nil {
		t.Fatalf("table without TTL: %v, want it to work", err)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "TTL is not enabled") {
		t.Fatalf("no warning for a table without TTL:\n%s", l)
	}
}

// A business write naming a missing table is a configuration fault, not
// the message's: Misconfigured (the consumer stops), never Permanent (it
// would dead-letter the message), and not retried. DynamoDB Local 3.3.1
// answers the whole TransactWriteItems with a ResourceNotFoundException
// (measured), not a ValidationException nor a cancellation reason, so
// retry.Classify's code table decides it and no mapping is needed.
func TestMissingBusinessTableMisconfigured(t *testing.T) {
	st, client, c := countedStore(t)
	at := clock()
	inv := &inventory{client: client, table: uniqueName("onceq_missing_inv_")}
	cl := mustClaim(t, st, dedup.ClaimRequest{Key: uniqueKey(t), Owner: "a", Now: at(0), LeaseUntil: at(30)})
	c.reset()
	err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: cl.Lease, Now: at(1), ExpiresAt: at(3600), Writes: []any{inv.note("sku-1")}})
	if retry.Classify(err) != retry.Misconfigured {
		t.Fatalf("Complete with a write to a missing table: %v (class %v), want Misconfigured", err, retry.Classify(err))
	}
	if n := c.get("TransactWriteItems"); n != 1 {
		t.Fatalf("%d TransactWriteItems, want 1 (a missing table is not retried)", n)
	}
	_, err = st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: uniqueKey(t), Owner: "b", Now: at(0), ExpiresAt: at(3600), Writes: []any{inv.note("sku-1")}})
	if retry.Classify(err) != retry.Misconfigured {
		t.Fatalf("ClaimComplete with a write to a missing table: %v (class %v), want Misconfigured", err, retry.Classify(err))
	}
}
