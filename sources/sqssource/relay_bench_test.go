package sqssource_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/proccpu"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/sqssource"
)

// countingStore counts the calls a relay makes to the outbox.
type countingStore struct {
	outbox.Store
	calls atomic.Int64
}

func (s *countingStore) Lease(ctx context.Context, req outbox.LeaseRequest) ([]outbox.Entry, error) {
	s.calls.Add(1)
	return s.Store.Lease(ctx, req)
}

func (s *countingStore) Dispatched(ctx context.Context, l []outbox.Lease, now, until time.Time) error {
	s.calls.Add(1)
	return s.Store.Dispatched(ctx, l, now, until)
}

// BenchmarkOutboxRelay measures sending onward through the outbox
// against hand-written loops, on one SQS queue each, in the same run:
//
//   - the relay's throughput (entries committed beforehand, drained by a
//     Relay with the SQS Sender) against a raw loop of SendMessageBatch
//     calls of ten, ten at once, as the Sender makes them;
//   - the whole cost per outgoing message, commit included: each input
//     committed with its outgoing message as an outbox entry, then the
//     relay's drain, against a hand-written "commit, then send" loop
//     (commit each input, send what it produced in batches of ten): client
//     CPU and store calls per message.
//
// Both commit to the memory store, so the CPU is the client's alone.
func BenchmarkOutboxRelay(b *testing.B) {
	c := client(b)
	sender, err := sqssource.NewSender(c)
	if err != nil {
		b.Fatal(err)
	}
	const workers = 10 // the Sender's calls in flight
	body := []byte(`{"event":"order.reserved","order_id":"o-1","sku":"sku-1","qty":2}`)
	var rawRate, relayRate float64
	var rawCPU, outboxCPU, handCPU time.Duration
	var outboxCalls, handCalls int64
	for n := range b.N {
		// The raw loop: SendMessageBatch of ten, ten at once.
		url, _ := createQueue(b, c, queueSpec{visibility: 30 * time.Second})
		cpu, start := proccpu.Used(), time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					first := next.Add(10) - 10
					if first >= benchMessages {
						return
					}
					in := &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url)}
					for i := first; i < first+10; i++ {
						in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.FormatInt(i-first, 10)),
							MessageBody: aws.String(string(body)), MessageAttributes: map[string]types.MessageAttributeValue{
								"idempotency-key": {DataType: aws.String("String"), StringValue: aws.String(fmt.Sprintf("raw-%d#out0", i))}}})
					}
					if _, err := c.SendMessageBatch(context.Background(), in); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		rawRate += benchMessages / time.Since(start).Seconds()
		rawCPU += proccpu.Used() - cpu

		// The outbox: commit each input with its outgoing message, then
		// let a relay drain the outbox.
		url, _ = createQueue(b, c, queueSpec{visibility: 30 * time.Second})
		store := memstoretest.New(b)
		cpu = proccpu.Used()
		for i := range benchMessages {
			now := time.Now()
			if _, err := store.ClaimComplete(context.Background(), dedup.ClaimCompleteRequest{Key: fmt.Sprintf("onceq#%d-%d", n, i), Owner: "w",
				Now: now, ExpiresAt: now.Add(time.Hour), Outbox: []outbox.Message{{Destination: url, Body: body}}}); err != nil {
				b.Fatal(err)
			}
		}
		counted := &countingStore{Store: store.Outbox()}
		relay, err := outbox.NewRelay(counted, sender, outbox.WithLogger(slog.New(slog.DiscardHandler)), outbox.PollInterval(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		for {
			leased, err := relay.Pass(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			if leased == 0 {
				break
			}
		}
		relayRate += benchMessages / time.Since(start).Seconds()
		outboxCPU += proccpu.Used() - cpu
		outboxCalls += int64(benchMessages) + counted.calls.Load() // the commits, then the relay's leases and marks
		if vis, _ := depth(b, c, url); vis != benchMessages {
			b.Fatalf("the relay sent %d messages, want %d", vis, benchMessages)
		}

		// By hand: commit, then send, ten to a batch.
		url, _ = createQueue(b, c, queueSpec{visibility: 30 * time.Second})
		store = memstoretest.New(b)
		cpu = proccpu.Used()
		var batch []types.SendMessageBatchRequestEntry
		for i := range benchMessages {
			now := time.Now()
			key := fmt.Sprintf("onceq#%d-%d", n, i)
			if _, err := store.ClaimComplete(context.Background(), dedup.ClaimCompleteRequest{Key: key, Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				b.Fatal(err)
			}
			handCalls++
			batch = append(batch, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(len(batch))), MessageBody: aws.String(string(body)),
				MessageAttributes: map[string]types.MessageAttributeValue{"idempotency-key": {DataType: aws.String("String"), StringValue: aws.String(key + "#out0")}}})
			if len(batch) == 10 || i == benchMessages-1 {
				if _, err := c.SendMessageBatch(context.Background(), &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: batch}); err != nil {
					b.Fatal(err)
				}
				batch = nil
			}
		}
		handCPU += proccpu.Used() - cpu
	}
	perMsg := func(d time.Duration) float64 {
		return float64(d) / float64(time.Microsecond) / float64(b.N*benchMessages)
	}
	b.ReportMetric(rawRate/float64(b.N), "raw_msgs/s")
	b.ReportMetric(relayRate/float64(b.N), "relay_msgs/s")
	b.ReportMetric(relayRate/rawRate, "ratio")
	b.ReportMetric(perMsg(rawCPU), "raw_cpu-us/msg")
	b.ReportMetric(perMsg(outboxCPU), "outbox_cpu-us/msg")
	b.ReportMetric(perMsg(handCPU), "hand_cpu-us/msg")
	b.ReportMetric(float64(outboxCalls)/float64(b.N*benchMessages), "outbox_store-calls/msg")
	b.ReportMetric(float64(handCalls)/float64(b.N*benchMessages), "hand_store-calls/msg")
}
