package sqssource_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/sqssource"
)

// The Source tells the observer the consumer hands it (Attach) of each SQS
// call it retries, so that a throttled queue slows the consumer too.
func TestRetriesReachAttachedObserver(t *testing.T) {
	t.Parallel()
	url, _ := createQueue(t, client(t), queueSpec{})
	p := faultproxy.Start(t, testenv.SQSEndpoint(t))
	cfg := awstest.Config(t, p.URL())
	c := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(p.URL()) })
	src := newSource(t, c, url, sqssource.WithRetryPolicy(retry.Policy{Initial: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 5}))
	var mu sync.Mutex
	var seen []retry.Class
	src.Attach(broker.Runtime{Observe: func(class retry.Class, _ error) {
		mu.Lock()
		seen = append(seen, class)
		mu.Unlock()
	}})
	p.AddRule(faultproxy.Rule{Times: 2, Fault: faultproxy.Throttle})
	if err := src.Check(context.Background()); err != nil {
		t.Fatalf("Check through two throttles: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(seen, retry.Throttled) {
		t.Fatalf("the attached observer saw %v, want retry.Throttled", seen)
	}
}

// The Source tells the consumer (Attach) of a ReceiveMessage its endpoint
// leaves unanswered past the long poll, naming the queue, and of one
// refused, and of the answers after.
func TestReceiveFailuresReachAttachedStatus(t *testing.T) {
	t.Parallel()
	url, _ := createQueue(t, client(t), queueSpec{})
	p := faultproxy.Start(t, testenv.SQSEndpoint(t))
	c := awssqs.NewFromConfig(awstest.Config(t, p.URL()), func(o *awssqs.Options) { o.BaseEndpoint = aws.String(p.URL()) })
	src := newSource(t, c, url, sqssource.WaitTime(time.Second),
		sqssource.WithRetryPolicy(retry.Policy{Initial: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 2}))
	reports := make(chan broker.Status, 64)
	// The endpoint hangs: every ReceiveMessage is answered 15s late.
	p.AddRule(faultproxy.Rule{Op: "ReceiveMessage", Fault: faultproxy.Latency, Delay: 15 * time.Second})
	src.Attach(broker.Runtime{Observe: func(retry.Class, error) {}, Status: func(s broker.Status) {
		select {
		case reports <- s:
		default:
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = src.Receive(ctx, 1) }()
	next := func(within time.Duration) broker.Status {
		t.Helper()
		select {
		case s := <-reports:
			return s
		case <-time.After(within):
			t.Fatalf("no report within %v", within)
			return broker.Status{}
		}
	}
	s := next(20 * time.Second) // the long poll (1s) and the margin (10s)
	if s.Err == nil || s.Broker != url || s.Waiting != "ReceiveMessage" || !strings.Contains(s.Err.Error(), url) {
		t.Fatalf("report %+v, want ReceiveMessage on %s unanswered", s, url)
	}
	p.ClearRules()
	p.AddRule(faultproxy.Rule{Op: "ReceiveMessage", Fault: faultproxy.InternalError})
	for s = next(30 * time.Second); s.Err == nil || !strings.Contains(s.Err.Error(), "InternalServerError"); s = next(30 * time.Second) {
	}
	p.ClearRules()
	for s = next(30 * time.Second); s.Err != nil; s = next(30 * time.Second) {
	}
	if s.Broker != url {
		t.Fatalf("answer %+v, want it to name %s", s, url)
	}
}
