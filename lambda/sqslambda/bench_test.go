package sqslambda_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onceq/onceq/internal/lambdatest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// BenchmarkInvocation measures records per second through one warm
// function under the emulator, batches of ten fresh records, each with
// one DynamoDB effect: with onceq (claim, then the effect committed with
// COMPLETED) and the same function without it (the effect alone).
//
//	go test -run '^$' -bench Invocation -benchtime 300x ./lambda/sqslambda/
func BenchmarkInvocation(b *testing.B) {
	for _, mode := range []string{"onceq", "plain"} {
		b.Run(mode, func(b *testing.B) {
			tb := lambdatest.NewTables(b)
			env := tb.Env()
			if mode == "plain" {
				env["TESTFUNC_MODE"] = "plain"
			}
			f := lambdatest.Start(b, bootstrap, 60, env)
			ctx := testenv.Context(b, 10*time.Minute)
			batch := func(n int) events.SQSEvent {
				var ev events.SQSEvent
				for i := range 10 {
					id := fmt.Sprintf("r%d-%d", n, i)
					ev.Records = append(ev.Records, events.SQSMessage{MessageId: id, Body: `{"id":"` + id + `"}`,
						Attributes:     map[string]string{"ApproximateReceiveCount": "1"},
						EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:bench", EventSource: "aws:sqs"})
				}
				return ev
			}
			if got := failures(b, f.Invoke(ctx, batch(-1))); len(got) != 0 { // warm up: init, check, connections
				b.Fatalf("warm-up reported %v", got)
			}
			n := 0
			start := time.Now()
			for b.Loop() {
				if got := failures(b, f.Invoke(ctx, batch(n))); len(got) != 0 {
					b.Fatalf("reported %v", got)
				}
				n++
			}
			b.ReportMetric(float64(n*10)/time.Since(start).Seconds(), "records/s")
		})
	}
}
