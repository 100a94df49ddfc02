package sqssource_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/sqssource"
)

// An SQS endpoint that takes connections and answers nothing, at start:
// New, under a context with no deadline, says what it waits on, naming
// the queue, and returns promptly once its context is cancelled.
func TestReviewHungEndpointAtStartNamed(t *testing.T) {
	url, _ := createQueue(t, client(t), queueSpec{})
	ep := testenv.SQSEndpoint(t)
	host := strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")
	proxy := faultproxy.NewTCP(t, host)
	proxy.Pause()
	defer proxy.Resume()
	proxied := "http://" + proxy.Addr()
	c := awssqs.NewFromConfig(awstest.Config(t, proxied), func(o *awssqs.Options) { o.BaseEndpoint = aws.String(proxied) })

	logs := &testenv.LogBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		src, err := sqssource.New(ctx, c, url, sqssource.WithLogger(logs.Logger(-4)))
		if err == nil {
			_ = src.Close(context.Background())
		}
		done <- err
	}()
	testenv.Eventually(t, 30*time.Second, "a log line naming the queue New waits on", func() bool {
		return strings.Contains(logs.String(), url)
	})
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("New returned no error with the endpoint hung")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("New did not return within 10s of its context's cancel")
	}
}
