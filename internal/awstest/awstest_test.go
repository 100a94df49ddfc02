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

// The endpoint a test names is the one its clients reach, though the
// environment (the servers' env file) sets the SDK's own per-service
// endpoint variables; without one, those variables hold.
func TestConfigEndpointWinsOverTheEnvironment(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:1")
	t.Setenv("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:2")
	named := "http://127.0.0.1:3"
	cfg := awstest.Config(t, named)
	if got := aws.ToString(dynamodb.NewFromConfig(cfg).Options().BaseEndpoint); got != named {
		t.Errorf("DynamoDB client of Config(%s): endpoint %s", named, got)
	}
	if got := aws.ToString(sqs.NewFromConfig(cfg).Options().BaseEndpoint); got != named {
		t.Errorf("SQS client of Config(%s): endpoint %s", named, got)
	}
	if got := aws.ToString(dynamodb.NewFromConfig(awstest.Config(t, "")).Options().BaseEndpoint); got != "http://127.0.0.1:1" {
		t.Errorf("DynamoDB client of Config(\"\"): endpoint %s, want the environment's", got)
	}
}
