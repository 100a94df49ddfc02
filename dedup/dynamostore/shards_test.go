package dynamostore_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/dynamostore/audit"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// A record of a TenantShards table is read back with the key the consumer
// claimed, not its partition key's shard: Get and TenantRecords return
// that key, and the auditor's doubled-completion WARN names its key_hash,
// the one the consumer's own logs carry.
func TestShardedRecordKeyIsTheConsumers(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	client := dynamoClient(t, ep, nil)
	table := recordsTable(t, client, dynamostore.TenantLayout(), dynamostore.WithStream())
	archive := recordsTable(t, client, dynamostore.TenantLayout())
	st := newStore(t, client, table, dynamostore.TenantLayout(), dynamostore.TenantShards(4))
	logs := &testenv.LogBuffer{}
	streams := dynamodbstreams.NewFromConfig(awstest.Config(t, ep), func(o *dynamodbstreams.Options) { o.BaseEndpoint = aws.String(ep) })
	auditor, err := audit.New(client, streams, table, archive, audit.AnyDeleteIsTTL(), audit.FromStreamStart(),
		audit.WithLogger(logs.Logger(slog.LevelInfo)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	key := "acme#" + uniqueKey(t)
	c := mustClaim(t, st, dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: "east", Now: now, LeaseUntil: now.Add(30 * time.Second)})
	if err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: c.Lease, Response: []byte("ok"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	rec, err := st.Get(t.Context(), key)
	if err != nil || rec.Key != key {
		t.Fatalf("Get: key %q, %v; want %q", rec.Key, err, key)
	}
	recs, err := st.TenantRecords(t.Context(), "acme", now.Add(-time.Minute), 10)
	if err != nil || len(recs) != 1 || recs[0].Key != key {
		t.Fatalf("TenantRecords: %+v, %v; want the one record with key %q", recs, err, key)
	}

	// Another owner's completion overwrites it (a second region's write).
	k, err := st.ItemKey(key)
	if err != nil {
		t.Fatal(err)
	}
	out, err := client.GetItem(t.Context(), &ddb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true), Key: k})
	if err != nil {
		t.Fatal(err)
	}
	out.Item["owner"] = &types.AttributeValueMemberS{Value: "west"}
	if _, err := client.PutItem(t.Context(), &ddb.PutItemInput{TableName: aws.String(table), Item: out.Item}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the doubled completion logged", func() bool {
		if err := auditor.Poll(t.Context()); err != nil {
			t.Fatalf("poll: %v", err)
		}
		return strings.Contains(logs.String(), "completed by two owners")
	})
	if !strings.Contains(logs.String(), "key_hash="+dedup.KeyHash(key)) {
		t.Errorf("the WARN does not name the consumer's key_hash %s:\n%s", dedup.KeyHash(key), logs.String())
	}
}
