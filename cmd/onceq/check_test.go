package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// checkSays runs onceq check and wants its exit code and exactly these
// lines, each given by its start.
func checkSays(t *testing.T, code int, args []string, lines ...string) {
	t.Helper()
	checkLines(t, context.Background(), code, args, lines...)
}

func TestCheckTable(t *testing.T) {
	c := localAWS(t)
	table := tableName(t)
	if code, _, errOut := onceq("create-table", "-table", table); code != 0 {
		t.Fatalf("create-table: exit %d: %s", code, errOut)
	}
	checkSays(t, 0, []string{"-table", table}, "ok   table "+table+": exists, key layout, readable")
	checkSays(t, 1, []string{"-table", table, "-tenant-layout"},
		"FAIL table "+table+": its key schema is not the tenant layout: check with no -tenant-layout")
	missing := tableName(t)
	checkSays(t, 1, []string{"-table", missing}, "FAIL table "+missing+": does not exist: create it with `onceq create-table -table "+missing+"`")

	// A table made by hand, without TTL: it works, and grows without end.
	noTTL := tableName(t)
	if _, err := c.CreateTable(t.Context(), &ddb.CreateTableInput{
		TableName:            aws.String(noTTL),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}); err != nil {
		t.Fatal(err)
	}
	checkSays(t, 0, []string{"-table", noTTL},
		"ok   table "+noTTL+": exists, key layout, readable",
		"WARN table "+noTTL+": dynamostore: TTL is not enabled on expires_at")
}

// localSQS points the CLI's standard SDK settings at the SQS emulator too,
// and returns a client for the test's own calls.
func localSQS(t *testing.T) *awssqs.Client {
	localAWS(t)
	ep := testenv.SQSEndpoint(t)
	t.Setenv("AWS_ENDPOINT_URL_SQS", ep)
	return awssqs.NewFromConfig(awstest.Config(t, ep), func(o *awssqs.Options) { o.BaseEndpoint = aws.String(ep) })
}

func createQueue(t *testing.T, q *awssqs.Client, name string, attrs map[string]string) (url, arn string) {
	t.Helper()
	out, err := q.CreateQueue(t.Context(), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	a, err := q.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.QueueUrl), a.Attributes["QueueArn"]
}

func TestCheckQueue(t *testing.T) {
	q := localSQS(t)
	name := tableName(t) // a fresh name
	dlq, dlqARN := createQueue(t, q, name+"-dlq", nil)
	redrive := func(n int) map[string]string {
		return map[string]string{"VisibilityTimeout": "30",
			"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, dlqARN, n)}
	}
	roomy, _ := createQueue(t, q, name+"-roomy", redrive(9))
	tight, _ := createQueue(t, q, name+"-tight", redrive(8))
	bare, _ := createQueue(t, q, name+"-bare", map[string]string{"VisibilityTimeout": "30"})

	// 9 = 5 attempts + 2 × ceil(60s lease / 30s visibility).
	checkSays(t, 0, []string{"-sqs-queue-url", roomy},
		"ok   queue "+name+"-roomy: reachable (visibility 30s)",
		"ok   queue "+name+"-roomy: dead-letter queue "+name+"-dlq from the redrive policy, reachable",
		"ok   queue "+name+"-roomy redrive policy: maxReceiveCount 9 is at least 9 = max-attempts 5 + 2 × ceil(lease-ttl 1m0s / visibility 30s)")
	checkSays(t, 0, []string{"-sqs-queue-url", tight},
		"ok   queue "+name+"-tight: reachable",
		"ok   queue "+name+"-tight: dead-letter queue",
		"WARN queue "+name+"-tight redrive policy: maxReceiveCount 8 is below 9 = max-attempts 5 + 2 × ceil(lease-ttl 1m0s / visibility 30s)")
	// The worker's own settings move the bound: 3 + 2 × ceil(61s / 30s) = 9.
	checkSays(t, 0, []string{"-sqs-queue-url", tight, "-max-attempts", "3", "-lease-ttl", "61s"},
		"ok   queue", "ok   queue",
		"WARN queue "+name+"-tight redrive policy: maxReceiveCount 8 is below 9 = max-attempts 3 + 2 × ceil(lease-ttl 1m1s / visibility 30s)")
	checkSays(t, 1, []string{"-sqs-queue-url", bare},
		"ok   queue "+name+"-bare: reachable",
		"FAIL queue "+name+"-bare: no dead-letter queue: pass -sqs-dlq-url, or give the queue a redrive policy")
	checkSays(t, 0, []string{"-sqs-queue-url", bare, "-sqs-dlq-url", dlq},
		"ok   dead-letter queue "+name+"-dlq: reachable",
		"ok   queue "+name+"-bare: reachable",
		"ok   queue "+name+"-bare redrive policy: none")
	// A dead-letter queue that takes smaller messages than its queue.
	small, _ := createQueue(t, q, name+"-small", map[string]string{"MaximumMessageSize": "1024"})
	checkSays(t, 1, []string{"-sqs-queue-url", bare, "-sqs-dlq-url", small},
		"ok   dead-letter queue "+name+"-small: reachable",
		"FAIL queue "+name+"-bare: sqssource: dead-letter queue "+name+"-small takes messages up to 1024 bytes (MaximumMessageSize), less than queue "+name+"-bare's")
	checkSays(t, 1, []string{"-sqs-queue-url", bare + "-gone", "-sqs-dlq-url", dlq + "-gone"},
		"FAIL dead-letter queue "+name+"-dlq-gone: does not exist",
		"FAIL queue "+name+"-bare-gone: does not exist")
}

func TestCheckKafka(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(1, "orders", "orders-dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()[0]
	checkSays(t, 0, []string{"-kafka-brokers", brokers, "-kafka-topic", "orders", "-kafka-dlq-topic", "orders-dlq"},
		"ok   kafka topic orders: orders, dead-letter topic orders-dlq reachable")
	checkSays(t, 1, []string{"-kafka-brokers", brokers, "-kafka-topic", "orders"},
		"ok   kafka topic orders: orders reachable",
		"FAIL kafka topic orders: no dead-letter topic: pass -kafka-dlq-topic")
	checkSays(t, 1, []string{"-kafka-brokers", brokers, "-kafka-topic", "orders", "-kafka-dlq-topic", "nowhere"},
		`FAIL kafka topic orders: kafka: unknown topic`)
	cluster.Close()
	checkSays(t, 1, []string{"-kafka-brokers", brokers, "-kafka-topic", "orders", "-kafka-dlq-topic", "orders-dlq"},
		"FAIL kafka topic orders: cannot reach the brokers "+brokers)
}

func TestReceivesNeeded(t *testing.T) {
	for _, c := range []struct {
		attempts          int
		lease, visibility time.Duration
		want              int
	}{
		{5, time.Minute, 30 * time.Second, 9},
		{5, time.Minute, time.Minute, 7},
		{5, time.Minute, 10 * time.Minute, 7},
		{5, 61 * time.Second, 30 * time.Second, 11},
		{1, 10 * time.Second, time.Second, 21},
	} {
		if got := consumer.ReceivesNeeded(c.attempts, c.lease, c.visibility); got != c.want {
			t.Errorf("ReceivesNeeded(%d, %v, %v) = %d, want %d", c.attempts, c.lease, c.visibility, got, c.want)
		}
	}
}
