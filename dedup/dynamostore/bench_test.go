package dynamostore_test

import (
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testenv"
)

const (
	benchWorkers = 32
	benchSKUs    = 256 // spread inventory writes so transactions rarely conflict
)

// BenchmarkDynamoDB measures, in one run, raw DynamoDB write shapes against
// the store's paths at 32-way concurrency, each case's DynamoDB calls per
// message (SDK middleware, every HTTP attempt counted), and their ratios:
//
//	go test -run '^$' -bench BenchmarkDynamoDB ./dedup/dynamostore/
func BenchmarkDynamoDB(b *testing.B) {
	ep := testenv.DynamoDBEndpoint(b)
	counted := &calls{} // every case's calls per message, raw or not
	client := dynamoClient(b, ep, counted)
	table := recordsTable(b, client)
	raw := uniqueName("onceq_raw_")
	if err := dynamostore.CreateTable(b.Context(), client, raw); err != nil {
		b.Fatal(err)
	}
	inv := newInventory(b, client)
	for i := range benchSKUs {
		inv.stock(b, "sku-"+strconv.Itoa(i), 1<<40)
	}
	st := newStore(b, client, table)
	run := uniqueName("")
	var seq atomic.Int64
	next := func() (string, string) {
		n := seq.Add(1)
		return fmt.Sprintf("bench#%s-%d", run, n), "sku-" + strconv.Itoa(int(n%benchSKUs))
	}
	now := time.Now()
	lease, keep := now.Add(time.Minute), now.Add(time.Hour)
	// A COMPLETED record every Duplicate op claims again.
	dupKey := fmt.Sprintf("bench#%s-dup", run)
	if c, err := st.ClaimComplete(b.Context(), dedup.ClaimCompleteRequest{Key: dupKey, PayloadHash: "h", Owner: "o", Response: []byte("ok"), Now: now, ExpiresAt: keep}); err != nil || !c.Acquired {
		b.Fatal(c, err)
	}
	rawPut := func(b *testing.B, k string) {
		_, err := client.PutItem(b.Context(), &ddb.PutItemInput{
			TableName: aws.String(raw),
			Item: map[string]types.AttributeValue{
				"pk":         &types.AttributeValueMemberS{Value: k},
				"status":     &types.AttributeValueMemberS{Value: "PENDING"},
				"expires_at": &types.AttributeValueMemberN{Value: strconv.FormatInt(lease.Unix(), 10)},
			},
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		})
		if err != nil {
			b.Error(err)
		}
	}
	// rawComplete is the raw shape of Complete: PENDING to COMPLETED,
	// conditioned on PENDING.
	rawComplete := func(k string) *types.Update {
		return &types.Update{
			TableName:                 aws.String(raw),
			Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: k}},
			UpdateExpression:          aws.String("SET #s = :c"),
			ConditionExpression:       aws.String("#s = :p"),
			ExpressionAttributeNames:  map[string]string{"#s": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":c": &types.AttributeValueMemberS{Value: "COMPLETED"}, ":p": &types.AttributeValueMemberS{Value: "PENDING"}},
		}
	}
	// claimThenComplete is the store's two-call path, writes (if any)
	// committed with the COMPLETED record.
	claimThenComplete := func(b *testing.B, k string, writes []any) {
		c, err := st.Claim(b.Context(), dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: k, Now: now, LeaseUntil: lease})
		if err != nil || !c.Acquired {
			b.Error(c, err)
			return
		}
		if err := st.Complete(b.Context(), dedup.CompleteRequest{Lease: c.Lease, Response: []byte("ok"), Now: now, ExpiresAt: keep, Writes: writes}); err != nil {
			b.Error(err)
		}
	}

	// Each mode runs right after its raw shape, so that a pair's ratio
	// comes from adjacent seconds on a machine whose load drifts.
	cases := []struct {
		name string
		op   func(b *testing.B)
	}{
		{"RawConditionalPut", func(b *testing.B) {
			k, _ := next()
			rawPut(b, k)
		}},
		{"ClaimComplete", func(b *testing.B) {
			k, _ := next()
			if _, err := st.ClaimComplete(b.Context(), dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: k, Response: []byte("ok"), Now: now, ExpiresAt: keep}); err != nil {
				b.Error(err)
			}
		}},
		{"RawPutThenUpdate", func(b *testing.B) {
			k, _ := next()
			rawPut(b, k)
			u := rawComplete(k)
			_, err := client.UpdateItem(b.Context(), &ddb.UpdateItemInput{
				TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression, ConditionExpression: u.ConditionExpression,
				ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues,
			})
			if err != nil {
				b.Error(err)
			}
		}},
		{"ClaimThenComplete", func(b *testing.B) {
			k, _ := next()
			claimThenComplete(b, k, nil)
		}},
		{"RawTransact2", func(b *testing.B) {
			k, sku := next()
			_, err := client.TransactWriteItems(b.Context(), &ddb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
				{Put: &types.Put{
					TableName: aws.String(raw),
					Item: map[string]types.AttributeValue{
						"pk":     &types.AttributeValueMemberS{Value: k},
						"status": &types.AttributeValueMemberS{Value: "COMPLETED"},
					},
					ConditionExpression: aws.String("attribute_not_exists(pk)"),
				}},
				inv.reserve(sku, 1),
			}})
			if err != nil {
				b.Error(err)
			}
		}},
		{"ClaimCompleteWith1Write", func(b *testing.B) {
			k, sku := next()
			if _, err := st.ClaimComplete(b.Context(), dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: k, Response: []byte("ok"), Now: now, ExpiresAt: keep, Writes: []any{inv.reserve(sku, 1)}}); err != nil {
				b.Error(err)
			}
		}},
		{"RawPutThenTransact2", func(b *testing.B) {
			// Transaction mode's raw shape: a conditional put, then the
			// record's update and the business write in one transaction.
			k, sku := next()
			rawPut(b, k)
			_, err := client.TransactWriteItems(b.Context(), &ddb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
				{Update: rawComplete(k)},
				inv.reserve(sku, 1),
			}})
			if err != nil {
				b.Error(err)
			}
		}},
		{"ClaimThenCompleteWith1Write", func(b *testing.B) {
			k, sku := next()
			claimThenComplete(b, k, []any{inv.reserve(sku, 1)})
		}},
		{"Duplicate", func(b *testing.B) {
			c, err := st.Claim(b.Context(), dedup.ClaimRequest{Key: dupKey, PayloadHash: "h", Owner: "other", Now: now, LeaseUntil: lease})
			if err != nil || c.Acquired || c.Existing.Status != dedup.StatusCompleted {
				b.Error(c, err)
			}
		}},
	}

	rates := map[string]float64{}
	par := (benchWorkers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0)
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.SetParallelism(par)
			counted.reset()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tc.op(b)
				}
			})
			r := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(r, "msgs/s")
			b.ReportMetric(float64(counted.total())/float64(b.N), "calls/msg")
			rates[tc.name] = r // the last (largest) run wins
		})
	}
	ratio := func(a, c string) float64 {
		if rates[c] == 0 {
			return 0
		}
		return rates[a] / rates[c]
	}
	// The ratios as metrics of one more entry, so one run prints them.
	b.Run("Ratios", func(b *testing.B) {
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(ratio("ClaimThenComplete", "RawConditionalPut"), "claim+complete/put")
		b.ReportMetric(ratio("ClaimThenComplete", "RawPutThenUpdate"), "claim+complete/put+update")
		b.ReportMetric(ratio("ClaimComplete", "RawConditionalPut"), "claimcomplete/put")
		b.ReportMetric(ratio("ClaimComplete", "ClaimThenComplete"), "claimcomplete/claim+complete")
		b.ReportMetric(ratio("ClaimCompleteWith1Write", "RawTransact2"), "claimcomplete+w/txn2")
		b.ReportMetric(ratio("ClaimThenCompleteWith1Write", "RawTransact2"), "claim+complete+w/txn2")
		b.ReportMetric(ratio("ClaimThenCompleteWith1Write", "RawPutThenTransact2"), "claim+complete+w/put+txn2")
	})
}
