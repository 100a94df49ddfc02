package sqssource_test

import (
	"context"
	"slices"
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
