package sqssource_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
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
	c := proxiedClient(t, proxy)

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

// proxiedClient is an SQS client that reaches the server through proxy.
func proxiedClient(t *testing.T, proxy *faultproxy.TCP) *awssqs.Client {
	proxied := "http://" + proxy.Addr()
	return awssqs.NewFromConfig(awstest.Config(t, proxied), func(o *awssqs.Options) { o.BaseEndpoint = aws.String(proxied) })
}

// A consumer whose SQS endpoint hangs after it received turns not ready
// within WaitTime + 10s + BrokerTimeout, naming the queue, and a stop
// then returns within 10s.
func TestReviewHungEndpointTurnsReadinessAndStopIsPrompt(t *testing.T) {
	url, _ := createQueue(t, client(t), queueSpec{})
	host := strings.TrimPrefix(testenv.SQSEndpoint(t), "http://")
	proxy := faultproxy.NewTCP(t, host)
	defer proxy.Resume()
	c := proxiedClient(t, proxy)
	ctx := testenv.Context(t, 2*time.Minute)
	if _, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("m1")}); err != nil {
		t.Fatal(err)
	}
	src, err := sqssource.New(ctx, c, url, sqssource.WaitTime(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.LogBuffer{}
	handled := make(chan string, 4)
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		handled <- string(m.Body)
		return consumer.Result{}, nil
	})
	cons, err := consumer.New(src, memstoretest.New(t), h, consumer.WithoutDeadLetters(),
		consumer.BrokerTimeout(5*time.Second), consumer.WithLogger(logs.Logger(-4)))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cons.Run(rctx) }()
	defer func() {
		if t.Failed() {
			t.Logf("consumer log:\n%s", logs.String())
		}
	}()
	select {
	case <-handled:
	case <-ctx.Done():
		t.Fatal("m1 not handled")
	}
	testenv.Eventually(t, 10*time.Second, "ready after m1", func() bool { return cons.Health().Ready })
	proxy.Pause()
	start := time.Now()
	testenv.Eventually(t, 30*time.Second, "not ready with the endpoint hung", func() bool { return !cons.Health().Ready })
	t.Logf("endpoint hung: not ready after %v", time.Since(start).Round(100*time.Millisecond))
	rec := httptest.NewRecorder()
	cons.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), url) {
		t.Fatalf("readyz %d %s: want 503 naming the queue %s", rec.Code, rec.Body, url)
	}
	stopAt := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60s of its cancel")
	}
	if took := time.Since(stopAt); took > 10*time.Second {
		t.Fatalf("stop took %v with the endpoint hung, want at most 10s", took)
	}
	proxy.Resume()
	if err := src.Close(testenv.Context(t, 30*time.Second)); err != nil {
		t.Logf("source close after the endpoint answered again: %v", err)
	}
}
