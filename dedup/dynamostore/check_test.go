package dynamostore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
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
	noTTL := tableWithoutTTL(t, client)
	if err := newStore(t, client, noTTL, dynamostore.WithLogger(logger)).Check(t.Context()); err != nil {
		t.Fatalf("table without TTL: %v, want it to work", err)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "TTL is not enabled") {
		t.Fatalf("no warning for a table without TTL:\n%s", l)
	}
}

// A store given no logger logs to the one a Guard (or Consumer) was given,
// also behind a user's pass-through wrapper (the store declares it in its
// Capabilities); a store given its own keeps it.
func TestLoggerHandedOver(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	noTTL := tableWithoutTTL(t, client)
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	var guardLogs, storeLogs testenv.LogBuffer
	for _, tc := range []struct {
		name      string
		opts      []dynamostore.Option
		wrapped   bool
		want, not *testenv.LogBuffer
	}{
		{"inherited", nil, false, &guardLogs, &storeLogs},
		{"inherited through a wrapper", nil, true, &guardLogs, &storeLogs},
		{"own", []dynamostore.Option{dynamostore.WithLogger(storeLogs.Logger(slog.LevelInfo))}, false, &storeLogs, &guardLogs},
	} {
		before, beforeWant := tc.not.String(), tc.want.String()
		var st dedup.Store = newStore(t, client, noTTL, tc.opts...)
		if tc.wrapped {
			st = storetest.Wrapped{Store: st}
		}
		g, err := consumer.NewGuard(st, h, consumer.WithLogger(guardLogs.Logger(slog.LevelInfo)))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Check(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.TrimPrefix(tc.want.String(), beforeWant), "TTL is not enabled") || tc.not.String() != before {
			t.Errorf("%s: the store's warning went to the wrong logger:\nguard's: %s\nstore's: %s", tc.name, guardLogs.String(), storeLogs.String())
		}
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
	err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: cl.Lease, Now: at(1), ExpiresAt: at(3600), Writes: []dedup.Write{inv.note("sku-1")}})
	if retry.Classify(err) != retry.Misconfigured {
		t.Fatalf("Complete with a write to a missing table: %v (class %v), want Misconfigured", err, retry.Classify(err))
	}
	if n := c.get("TransactWriteItems"); n != 1 {
		t.Fatalf("%d TransactWriteItems, want 1 (a missing table is not retried)", n)
	}
	_, err = st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: uniqueKey(t), Owner: "b", Now: at(0), ExpiresAt: at(3600), Writes: []dedup.Write{inv.note("sku-1")}})
	if retry.Classify(err) != retry.Misconfigured {
		t.Fatalf("ClaimComplete with a write to a missing table: %v (class %v), want Misconfigured", err, retry.Classify(err))
	}
}

// tableWithoutTTL makes an idempotency table by hand, without TTL.
func tableWithoutTTL(t *testing.T, client *ddb.Client) string {
	t.Helper()
	name := uniqueName("onceq_nottl_")
	if _, err := client.CreateTable(t.Context(), &ddb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	return name
}

// A policy without dynamodb:PutItem stops the worker at Check, before any
// message, and the probe write leaves nothing in the table.
func TestCheckProvesPutPermission(t *testing.T) {
	rig := newFaultRig(t, fastPolicy(3))
	if err := rig.st.Check(t.Context()); err != nil {
		t.Fatalf("permitted: %v", err)
	}
	if _, err := rig.direct.Get(t.Context(), "onceq-check#"+rig.st.Table()); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("the probe left a record: %v", err)
	}
	rig.proxy.AddRule(faultproxy.Rule{Op: "PutItem", Fault: faultproxy.AccessDenied})
	err := rig.st.Check(t.Context())
	if err == nil || retry.Classify(err) != retry.Misconfigured || !strings.Contains(err.Error(), "writing table") {
		t.Fatalf("PutItem denied: %v (class %v), want a Misconfigured error about writing the table", err, retry.Classify(err))
	}
}

// Without credentials, Check says so plainly, as a configuration fault.
func TestCheckWithoutCredentials(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	client := ddb.NewFromConfig(awstest.NoCredentialsConfig(t, ep), func(o *ddb.Options) { o.BaseEndpoint = aws.String(ep) })
	st := newStore(t, client, "onceq_no_credentials")
	err := st.Check(t.Context())
	if err == nil || !strings.Contains(err.Error(), "no AWS credentials found") || strings.Contains(err.Error(), "IMDS") {
		t.Fatalf("Check without credentials: %v, want \"no AWS credentials found\" and no EC2 metadata chain", err)
	}
	if class := retry.Classify(err); class != retry.Misconfigured {
		t.Errorf("class %v, want misconfigured", class)
	}
}
