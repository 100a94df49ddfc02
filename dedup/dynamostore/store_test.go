package dynamostore_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

func TestConformance(t *testing.T) {
	conformance(t, nil, storetest.Options{NilWrites: []dedup.Write{(*dynamostore.Write)(nil)}})
}

func TestConformanceTenantLayout(t *testing.T) {
	conformance(t, []dynamostore.Option{dynamostore.TenantLayout()}, storetest.Options{RaceGoroutines: 16, RaceRounds: 20}, dynamostore.TenantLayout())
}

// conformance runs the suite on a fresh table, with a fault proxy in front
// of DynamoDB Local to meet a throttle. The suite's clock runs an hour
// ahead of the real one, so the clock check is off.
func conformance(t *testing.T, opts []dynamostore.Option, o storetest.Options, tableOpts ...dynamostore.TableOption) {
	ep := testenv.DynamoDBEndpoint(t)
	c := dynamoClient(t, ep, nil)
	table := recordsTable(t, c, append(tableOpts, dynamostore.WithOutbox())...)
	opts = append(opts, dynamostore.WithoutClockCheck())
	o.RejectingWrite = func() dedup.Write { return rejecting(table) }
	o.Throttled = func(t *testing.T) dedup.Store {
		p := faultproxy.Start(t, ep)
		p.AddRule(faultproxy.Rule{Times: 2, Fault: faultproxy.Throttle})
		return newStore(t, dynamoClient(t, p.URL(), nil), table, append(opts, dynamostore.WithRetryPolicy(fastPolicy(5)))...)
	}
	o.Corrupt = func(t *testing.T, _ dedup.Store, l dedup.Lease, how storetest.Corruption) {
		corruptItem(t, c, table, l.Owner, how)
	}
	o.Inserts, o.BatchMax = inserts(t, c), 100
	o.MissingOutbox = func(t *testing.T) (dedup.Store, string) {
		// A records table made without its outbox table.
		table := recordsTable(t, c, tableOpts...)
		return newStore(t, c, table, opts...), dynamostore.OutboxTable(table)
	}
	o.Peer = func(t *testing.T, _ dedup.Store) dedup.Store { return newStore(t, c, table, opts...) }
	storetest.Run(t, func(t *testing.T) dedup.Store { return newStore(t, c, table, opts...) }, o)
}

// corruptItem makes the item of owner in table corrupt in the way how,
// found by a scan whatever the layout keys it by.
func corruptItem(t *testing.T, c *ddb.Client, table, owner string, how storetest.Corruption) {
	t.Helper()
	set := map[storetest.Corruption]string{storetest.CorruptStatus: "#a = :s", storetest.CorruptAttempts: "attempts = :n",
		storetest.CorruptVersion: "version = :n"}[how]
	if set == "" {
		t.Fatalf("no way to plant %v", how)
	}
	var item map[string]types.AttributeValue
	for p := ddb.NewScanPaginator(c, &ddb.ScanInput{TableName: aws.String(table), FilterExpression: aws.String("#o = :o"),
		ExpressionAttributeNames:  map[string]string{"#o": "owner"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":o": &types.AttributeValueMemberS{Value: owner}}}); p.HasMorePages() && item == nil; {
		out, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Items) > 0 {
			item = out.Items[0]
		}
	}
	if item == nil {
		t.Fatalf("no item of owner %s", owner)
	}
	k := map[string]types.AttributeValue{"pk": item["pk"]}
	if sk, ok := item["sk"]; ok {
		k["sk"] = sk
	}
	in := &ddb.UpdateItemInput{TableName: aws.String(table), Key: k, UpdateExpression: aws.String("SET " + set),
		ExpressionAttributeValues: map[string]types.AttributeValue{}}
	if how == storetest.CorruptStatus {
		in.ExpressionAttributeNames = map[string]string{"#a": "status"}
		in.ExpressionAttributeValues[":s"] = &types.AttributeValueMemberS{Value: "BOGUS"}
	} else {
		in.ExpressionAttributeValues[":n"] = &types.AttributeValueMemberN{Value: "-1"}
	}
	if _, err := c.UpdateItem(t.Context(), in); err != nil {
		t.Fatal(err)
	}
}

// A consumer whose key already hashes the body claims with no payload
// hash: both claim shapes must store and return it as empty.
func TestClaimWithoutPayloadHash(t *testing.T) {
	ctx := context.Background()
	c := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	s := newStore(t, c, recordsTable(t, c))
	now := time.Now()
	cl, err := s.Claim(ctx, dedup.ClaimRequest{Key: "ns#a", Owner: "o1", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !cl.Acquired {
		t.Fatalf("Claim: %+v, %v", cl, err)
	}
	if err := s.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	cc, err := s.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: "ns#b", Owner: "o2", Now: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil || !cc.Acquired {
		t.Fatalf("ClaimComplete: %+v, %v", cc, err)
	}
	for _, k := range []string{"ns#a", "ns#b"} {
		r, err := s.Get(ctx, k)
		if err != nil || r.Status != dedup.StatusCompleted || r.PayloadHash != "" {
			t.Fatalf("%s: %+v, %v; want COMPLETED with no payload hash", k, r, err)
		}
	}
}

// rejecting is a business write whose own condition fails: a check that
// an item no one writes exists.
func rejecting(table string) dynamostore.Write {
	return dynamostore.Write{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(table), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "no such item"}},
		ConditionExpression: aws.String("attribute_exists(pk)"),
	}}
}
