package sqssource_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/plainbody"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/proccpu"
	"github.com/onceq/onceq/sources/sourcetest"
	"github.com/onceq/onceq/sources/sqssource"
)

const benchMessages = 10000

func fill(b *testing.B, c *awssqs.Client, url string) {
	b.Helper()
	msgs := make([]sourcetest.Outgoing, benchMessages)
	for i := range msgs {
		msgs[i] = sourcetest.Outgoing{Body: []byte(fmt.Sprintf(`{"order":"o-%d"}`, i))}
	}
	if err := sendBatch(context.Background(), c, url, false, msgs); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRawVsConsumer drains the same number of messages with a raw
// Receive(10)+DeleteMessageBatch loop and with the consumer (memory store),
// both at concurrency 8 (eight receivers each), and reports the ratio and
// each side's client CPU per message. One op drains two queues.
// The raw loop's time ends at its last delete; the consumer's when Run has
// returned with every ack flushed.
func BenchmarkRawVsConsumer(b *testing.B) {
	c := client(b)
	const workers = 8
	var rawRate, onceqRate float64
	var rawCPU, onceqCPU time.Duration
	for range b.N {
		url, _ := createQueue(b, c, queueSpec{visibility: 30 * time.Second})
		fill(b, c, url)
		cpu := proccpu.Used()
		start := time.Now()
		var done, finished atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for done.Load() < benchMessages {
					out, err := c.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url),
						MaxNumberOfMessages: 10, WaitTimeSeconds: 1}, rawCallOptions)
					if err != nil || len(out.Messages) == 0 {
						continue
					}
					entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
					for i, m := range out.Messages {
						entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle}
					}
					if _, err := c.DeleteMessageBatch(context.Background(), &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}, rawCallOptions); err == nil {
						if done.Add(int64(len(entries))) >= benchMessages {
							finished.CompareAndSwap(0, int64(time.Since(start)))
						}
					}
				}
			}()
		}
		wg.Wait() // the last pollers' empty long polls are not counted
		rawRate += benchMessages / time.Duration(finished.Load()).Seconds()
		rawCPU += proccpu.Used() - cpu

		url, _ = createQueue(b, c, queueSpec{visibility: 30 * time.Second})
		fill(b, c, url)
		seen := &outcomes{}
		h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
		// The same receive concurrency as the raw loop: eight pollers,
		// room for each one's ten messages.
		cons, err := consumer.New(newSource(b, c, url, sqssource.Pollers(workers)), memstoretest.New(b), h, consumer.WithoutDeadLetters(),
			consumer.Concurrency(workers), consumer.MaxInFlight(10*workers), consumer.WithLogger(slog.New(slog.DiscardHandler)),
			consumer.WithHooks(seen))
		if err != nil {
			b.Fatal(err)
		}
		cpu = proccpu.Used()
		start = time.Now()
		stop := runConsumer(b, cons)
		for seen.count(consumer.Processed) < benchMessages {
			time.Sleep(time.Millisecond) // a benchmark's wait for its count, not a test's proof
		}
		// Counted until the last batched delete has landed (the queue
		// empty), as the raw loop is until its last delete: not the stop,
		// which waits out the long poll in flight, as the raw loop's last
		// empty polls are not counted either.
		for {
			if vis, inflight := depth(b, c, url); vis+inflight == 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		onceqRate += benchMessages / time.Since(start).Seconds()
		if err := stop(); err != nil {
			b.Fatal(err)
		}
		onceqCPU += proccpu.Used() - cpu
		if vis, inflight := depth(b, c, url); vis+inflight != 0 {
			b.Fatalf("consumer left %d visible, %d in flight", vis, inflight)
		}
	}
	b.ReportMetric(rawRate/float64(b.N), "raw_msgs/s")
	b.ReportMetric(onceqRate/float64(b.N), "onceq_msgs/s")
	b.ReportMetric(onceqRate/rawRate, "ratio")
	perMsg := func(d time.Duration) float64 {
		return float64(d) / float64(time.Microsecond) / float64(b.N*benchMessages)
	}
	b.ReportMetric(perMsg(rawCPU), "raw_cpu-us/msg")
	b.ReportMetric(perMsg(onceqCPU), "onceq_cpu-us/msg")
}

// rawCallOptions puts the raw loop on the Source's footing: the request
// body without WriteTo (package plainbody), without which a lost
// ReceiveMessage answer now and then stalls the raw side for 30s.
func rawCallOptions(o *awssqs.Options) {
	o.HTTPClient = plainbody.Client(o.HTTPClient)
}
