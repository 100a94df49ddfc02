package testenv_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/onceq/onceq/internal/testenv"
)

// TestDynamoDBLocalAnswers proves that the DynamoDB server started by
// integration/servers.sh answers the Go SDK.
func TestDynamoDBLocalAnswers(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	checkLoopback(t, ep)
	cfg := testenv.AWSConfig(t, ep)
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
	cfg := testenv.AWSConfig(t, ep)
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

func TestContextEndsAfterItsDuration(t *testing.T) {
	ctx := testenv.Context(t, 50*time.Millisecond)
	select {
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("ended with %v", ctx.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("context did not end")
	}
}

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	var polls atomic.Int32
	testenv.Eventually(t, 5*time.Second, "never", func() bool { return polls.Add(1) == 3 })
	if n := polls.Load(); n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
}

func TestLoggerFollowsTheEnvironment(t *testing.T) {
	t.Setenv(testenv.LogEnv, "")
	if testenv.Logger(t).Enabled(context.Background(), slog.LevelError) {
		t.Fatal("logs without " + testenv.LogEnv)
	}
	t.Setenv(testenv.LogEnv, "warn")
	l := testenv.Logger(t)
	if !l.Enabled(context.Background(), slog.LevelWarn) || l.Enabled(context.Background(), slog.LevelInfo) {
		t.Fatal(testenv.LogEnv + "=warn: want warn and above only")
	}
	t.Setenv(testenv.LogEnv, "1")
	if !testenv.Logger(t).Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal(testenv.LogEnv + "=1: want debug")
	}
}
