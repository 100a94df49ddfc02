package batchbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource"
)

// BenchmarkBatchDynamoDB runs batch mode over DynamoDB's offset rows
// (DynamoDB Local), batches of up to 100 records of one partition, each
// record one business write (a Put) in the batch's TransactWriteItems.
// store_writes/msg counts the store's calls (Acquire and each commit,
// one TransactWriteItems) per record: a batch of 100 records needs 101
// items, over DynamoDB's 100, so it commits in two parts.
func BenchmarkBatchDynamoDB(b *testing.B) {
	const records = 5000
	ep := testenv.DynamoDBEndpoint(b)
	db := ddb.NewFromConfig(awstest.Config(b, ""), func(o *ddb.Options) { o.BaseEndpoint = aws.String(ep) })
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(partitions, "orders"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("orders"), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	recs := make([]*kgo.Record, records)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte{byte(i)}, Value: []byte(`{"order_id":"o","sku":"sku-1","qty":1}`)}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	cl.Close()
	ctx := context.Background()
	var writes, total int64
	var took time.Duration
	b.ResetTimer()
	for range b.N {
		s := suffix()
		idem, rows := "bench_idem_"+s, "bench_rows_"+s
		if err := dynamostore.CreateTable(ctx, db, idem); err != nil {
			b.Fatal(err)
		}
		if _, err := db.CreateTable(ctx, &ddb.CreateTableInput{TableName: aws.String(rows), BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}}}); err != nil {
			b.Fatal(err)
		}
		st, err := dynamostore.New(db, dynamostore.WithTable(idem))
		if err != nil {
			b.Fatal(err)
		}
		store := &counting{Store: st.Offsets()}
		h := batch.HandlerFunc(func(_ context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
			ws := make([]dedup.Write, len(msgs))
			for i, m := range msgs {
				ws[i] = dynamostore.Write{Put: &types.Put{TableName: aws.String(rows),
					Item: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: m.ID}, "body": &types.AttributeValueMemberB{Value: m.Body}}}}
			}
			return ws, nil
		})
		r, err := batch.NewRunner(store, h, batch.MaxRecords(100), batch.Window(50*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		src, err := franzsource.NewBatch(ctx, []string{addr}, "batch-"+s, []string{"orders"}, r, groupOptions()...)
		if err != nil {
			b.Fatal(err)
		}
		took += runUntil(b, time.Now(), src.Run, func() bool { return store.records.Load() >= records })
		writes += store.calls.Load()
		total += records
	}
	b.StopTimer()
	b.ReportMetric(float64(total)/took.Seconds(), "batch_msgs/s")
	b.ReportMetric(float64(writes)/float64(total), "store_writes/msg")
}
