package awstest_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// TestDynamoDBLocalAnswers proves that the DynamoDB server started by
// integration/servers.sh answers the Go SDK.
func TestDynamoDBLocalAnswers(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	checkLoopback(t, ep)
	cfg := awstest.Config(t, ep)
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ep) })
	out, err := client.ListTables(t.Context(), &dynamodb.ListTablesInput{})
	if err != nil {
		t.Fatalf("ListTables against %s: %v", ep, err)
	}
	t.Logf("DynamoDB at %s: %d tables", ep, len(out.TableNames))
}

// TestSQSEmulatorAnswers proves that the SQS server started by
// integration/servers.sh answers the Go SDK.
func TestSQSEmulatorAnswers(t *testing.T) {
	ep := testenv.SQSEndpoint(t)
	checkLoopback(t, ep)
	cfg := awstest.Config(t, ep)
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(ep) })
	out, err := client.ListQueues(t.Context(), &sqs.ListQueuesInput{})
	if err != nil {
		t.Fatalf("ListQueues against %s: %v", ep, err)
	}
	t.Logf("SQS at %s: %d queues", ep, len(out.QueueUrls))
}

func checkLoopback(t *testing.T, ep string) {
	t.Helper()
	if !strings.HasPrefix(ep, "http://127.0.0.1:") && !strings.HasPrefix(ep, "http://localhost:") &&
		!strings.HasPrefix(ep, "http://[::1]:") {
		t.Fatalf("endpoint %q is not on loopback; tests only talk to servers on this machine", ep)
	}
}
