package awscreds_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/onceq/onceq/internal/awscreds"
	"github.com/onceq/onceq/retry"
)

func TestExplain(t *testing.T) {
	if awscreds.Explain(nil) != nil {
		t.Fatal("Explain(nil) is not nil")
	}
	other := errors.New("operation error SQS: GetQueueAttributes, https response error StatusCode: 400")
	if got := awscreds.Explain(other); got != other {
		t.Fatalf("an error with credentials passed through as %v", got)
	}
	none := fmt.Errorf("operation error DynamoDB: GetItem, get identity: get credentials: failed to refresh cached credentials, no EC2 IMDS role found, %w",
		errors.New("operation error ec2imds: GetMetadata, request canceled"))
	got := awscreds.Explain(none)
	if !strings.HasPrefix(got.Error(), "no AWS credentials found") || strings.Contains(got.Error(), "IMDS") {
		t.Errorf("no credentials: %q", got)
	}
	if !errors.Is(got, none) || retry.Classify(got) != retry.Misconfigured {
		t.Errorf("no credentials: does not wrap the SDK's error, or class %v", retry.Classify(got))
	}
	if again := awscreds.Explain(fmt.Errorf("sqssource: queue q: %w", got)); !errors.Is(again, got) || strings.Count(again.Error(), "no AWS credentials") != 1 {
		t.Errorf("explained twice: %q", again)
	}
	failed := errors.New("operation error SQS: ReceiveMessage, get identity: get credentials: failed to refresh cached credentials, the SSO session has expired")
	if got := awscreds.Explain(failed); !strings.HasPrefix(got.Error(), "AWS credentials could not be loaded: ") || !strings.Contains(got.Error(), "SSO session") {
		t.Errorf("a failing provider: %q", got)
	}
}
