package dynamostore_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/memsource"
)

// capacityPerSecond is the provisioned-capacity ceiling of the store
// economics comparison, in requests per second.
const capacityPerSecond = 300

// capacityResult is one run of the consumer under the capacity ceiling.
type capacityResult struct {
	messages    int
	elapsed     time.Duration
	requests    int // every request the proxy saw
	throttled   int // answered over capacity
	p99         time.Duration
	handled     map[string]int // handler runs per message
	processed   map[string]int // Processed outcomes per message
	retrying    int            // Retrying outcomes: the store gave up
	acked, dead int
	completed   int // records COMPLETED in the table afterwards
	minLimit    int // lowest adaptive limit seen (0 if fixed)
}

func (r capacityResult) rate() float64 { return float64(r.messages) / r.elapsed.Seconds() }

func (r capacityResult) throttledShare() float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(r.throttled) / float64(r.requests)
}

// callsPerMessage is what a message costs in calls the ceiling admitted.
func (r capacityResult) callsPerMessage() float64 {
	return float64(r.requests-r.throttled) / float64(r.messages)
}

// ofCeiling is the throughput as a share of what the ceiling admits over
// the run at this run's calls per message: capacityPerSecond for each
// second plus the bucket's initial burst of one second's worth.
func (r capacityResult) ofCeiling() float64 {
	admitted := capacityPerSecond * (r.elapsed.Seconds() + 1)
	return float64(r.messages) / (admitted / r.callsPerMessage())
}

func (r capacityResult) String() string {
	return fmt.Sprintf("%6.1f msgs/s (%.2f of the ceiling at %.2f calls/msg), %5.1f%% of %d calls throttled, p99 %v, %d store give-ups, %d handler reruns",
		r.rate(), r.ofCeiling(), r.callsPerMessage(), 100*r.throttledShare(), r.requests, r.p99.Round(time.Millisecond), r.retrying, r.reruns())
}

// capacityObserver records each message's time from receipt to ack, and
// the adaptive limit's low point.
type capacityObserver struct {
	mu        sync.Mutex
	lat       []time.Duration
	minLimit  int
	processed map[string]int
	retrying  int
}

func (o *capacityObserver) OnMessageOutcome(_ context.Context, m *consumer.Message, out consumer.Outcome, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch out.Kind {
	case consumer.Processed:
		o.processed[string(m.Body)]++
	case consumer.Retrying:
		o.retrying++
	}
}

func (o *capacityObserver) OnMessageSettled(_ context.Context, m *consumer.Message, a consumer.Action, err error) {
	if a != consumer.Ack || err != nil {
		return
	}
	o.mu.Lock()
	o.lat = append(o.lat, time.Since(m.ReceivedAt))
	o.mu.Unlock()
}

func (o *capacityObserver) OnPoolConcurrencyLimit(n int) {
	o.mu.Lock()
	if o.minLimit == 0 || n < o.minLimit {
		o.minLimit = n
	}
	o.mu.Unlock()
}

// runUnderCapacity sends messages distinct messages through a consumer
// (Concurrency 16, the DynamoDB store behind a proxy admitting
// capacityPerSecond requests/s) until every one is acked, then checks
// the table.
func runUnderCapacity(tb testing.TB, messages int, fixed bool) capacityResult {
	tb.Helper()
	ep := testenv.DynamoDBEndpoint(tb)
	direct := dynamoClient(tb, ep, nil)
	table := recordsTable(tb, direct)
	proxy := faultproxy.Start(tb, ep)
	// Give-ups are counted as Retrying outcomes; their log lines would
	// only split the benchmark's result lines.
	st := newStore(tb, dynamoClient(tb, proxy.URL(), nil), table, dynamostore.WithLogger(slog.New(slog.DiscardHandler)))

	ctx := context.Background()
	q := memsourcetest.NewQueue(tb, "capacity")
	for i := range messages {
		_ = q.Send(ctx, memsource.Outgoing{Body: []byte("order-" + strconv.Itoa(i))})
	}
	var mu sync.Mutex
	handled := map[string]int{}
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		mu.Lock()
		handled[string(m.Body)]++
		mu.Unlock()
		return consumer.Result{Response: []byte("ok")}, nil
	})
	obs := &capacityObserver{processed: map[string]int{}}
	opts := []consumer.Option{consumer.Concurrency(16), consumer.MaxInFlight(32), consumer.WithHooks(obs),
		consumer.Namespace("cap")}
	if fixed {
		opts = append(opts, consumer.WithoutAdaptiveConcurrency())
	}
	c, err := consumer.New(q.Source(), st, h, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	// The ceiling starts with a full bucket, as a table's burst capacity
	// does; set here so both runs start alike.
	proxy.SetCapacity(capacityPerSecond)
	start := time.Now()
	go func() { done <- c.Run(runCtx) }()
	deadline := time.After(5 * time.Minute)
	for stats := q.Stats(); stats.Acked+stats.DeadLettered < messages; stats = q.Stats() {
		select {
		case <-deadline:
			cancel()
			<-done
			tb.Fatalf("after 5 minutes %+v of %d messages", stats, messages)
		case <-time.After(5 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		tb.Fatal(err)
	}
	ps := proxy.Stats()
	proxy.SetCapacity(0)

	obs.mu.Lock()
	lat := slices.Clone(obs.lat)
	minLimit, processed, retrying := obs.minLimit, obs.processed, obs.retrying
	obs.mu.Unlock()
	slices.Sort(lat)
	var p99 time.Duration
	if len(lat) > 0 {
		p99 = lat[min(len(lat)-1, len(lat)*99/100)]
	}
	completed := 0
	check := newStore(tb, direct, table)
	for i := range messages {
		k, err := dedup.DerivedKey("cap", dedup.PayloadHash([]byte("order-"+strconv.Itoa(i))))
		if err != nil {
			tb.Fatal(err)
		}
		if rec, err := check.Get(ctx, k); err == nil && rec.Status == dedup.StatusCompleted {
			completed++
		}
	}
	stats := q.Stats()
	return capacityResult{messages: messages, elapsed: elapsed, requests: ps.Requests, throttled: ps.OverCapacity,
		p99: p99, handled: handled, processed: processed, retrying: retrying, acked: stats.Acked, dead: stats.DeadLettered, completed: completed, minLimit: minLimit}
}

// checkExactlyOnce fails tb unless every message was processed (its
// result committed as COMPLETED) exactly once and acked, nothing was
// dead-lettered, and the table holds a COMPLETED record for each. A
// handler may run again after the store gave up on a throttled call
// (Retrying): that is the at-least-once side of claim/complete, counted
// in reruns.
func checkExactlyOnce(tb testing.TB, name string, r capacityResult) {
	tb.Helper()
	if r.acked != r.messages || r.dead != 0 || r.completed != r.messages || len(r.processed) != r.messages {
		tb.Fatalf("%s: %d acked, %d dead-lettered, %d COMPLETED, %d processed, of %d messages",
			name, r.acked, r.dead, r.completed, len(r.processed), r.messages)
	}
	for k, n := range r.processed {
		if n != 1 {
			tb.Fatalf("%s: %s processed %d times", name, k, n)
		}
	}
}

// reruns is how many handler runs there were beyond one per message.
func (r capacityResult) reruns() int {
	n := 0
	for _, c := range r.handled {
		n += c - 1
	}
	return n
}

// Under a 300 requests/s ceiling, fixed concurrency with per-call backoff
// against the adaptive limiter: both process every message exactly once;
// the comparison is logged (figures are for make bench, not asserted).
func TestCapacityFixedVsAdaptive(t *testing.T) {
	const messages = 1200
	fixed := runUnderCapacity(t, messages, true)
	checkExactlyOnce(t, "fixed", fixed)
	adaptive := runUnderCapacity(t, messages, false)
	checkExactlyOnce(t, "adaptive", adaptive)
	// On a loaded machine DynamoDB Local may never reach the ceiling: then
	// there is nothing to compare, but exactly-once still holds.
	if fixed.throttled == 0 {
		t.Logf("fixed concurrency was never throttled (%d requests): the store was slower than the ceiling", fixed.requests)
	}
	if adaptive.throttled > 0 && (adaptive.minLimit == 0 || adaptive.minLimit >= 16) {
		t.Fatalf("the adaptive limit never dropped below Concurrency (low point %d) though %d calls were throttled", adaptive.minLimit, adaptive.throttled)
	}
	t.Logf("capacity %d req/s, %d messages each:", capacityPerSecond, messages)
	t.Logf("fixed:    %v", fixed)
	t.Logf("adaptive: %v (limit fell to %d)", adaptive, adaptive.minLimit)
}

// BenchmarkCapacity is TestCapacityFixedVsAdaptive's comparison with more
// messages, as metrics; one op is one run of each mode.
func BenchmarkCapacity(b *testing.B) {
	const messages = 3000
	for _, mode := range []struct {
		name  string
		fixed bool
	}{{"Fixed", true}, {"Adaptive", false}} {
		b.Run(mode.name, func(b *testing.B) {
			var rate, share, ofCeiling, p99 float64
			for range b.N {
				r := runUnderCapacity(b, messages, mode.fixed)
				checkExactlyOnce(b, mode.name, r)
				rate += r.rate()
				share += r.throttledShare()
				ofCeiling += r.ofCeiling()
				p99 += float64(r.p99) / float64(time.Millisecond)
			}
			n := float64(b.N)
			b.ReportMetric(rate/n, "msgs/s")
			b.ReportMetric(100*share/n, "throttled_%")
			b.ReportMetric(ofCeiling/n, "of_ceiling")
			b.ReportMetric(p99/n, "p99_ms")
		})
	}
}
