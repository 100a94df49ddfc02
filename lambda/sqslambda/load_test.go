package sqslambda_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/lambdatest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// TestSQSThousand: 1,000 messages, 20% of them duplicates, in batches of
// ten as the event source mapping sends them, one invocation stopped by
// the function's timeout. Every effect happens exactly once; a record not
// reported has its key COMPLETED when the invocation returns, and a record
// whose key was COMPLETED before an invocation is never reported.
func TestSQSThousand(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	t.Parallel()
	tb := lambdatest.NewTables(t)
	q := newQueue(t, "lambda-thousand", false)
	env := tb.Env()
	env["TESTFUNC_SKEW"] = "1s"
	f := lambdatest.Start(t, bootstrap, 4, env) // seconds; the slow record outlasts it
	ctx := testenv.Context(t, 80*time.Second)
	store, err := dynamostore.New(tb.Client, dynamostore.WithTable(tb.Idempotency))
	if err != nil {
		t.Fatal(err)
	}

	const unique, dups = 800, 200
	bodies := make([]string, 0, unique+dups)
	for i := range unique {
		bodies = append(bodies, fmt.Sprintf(`{"id":"o%d"}`, i))
	}
	// One record sleeps past the function's timeout on its first delivery.
	const slowBody = `{"id":"o417","sleep_first_ms":8000}`
	bodies[417] = slowBody
	rng := rand.New(rand.NewPCG(1, 2))
	for range dups {
		bodies = append(bodies, bodies[rng.IntN(unique)])
	}
	rng.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	for i := 0; i < len(bodies); i += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j, b := range bodies[i:min(i+10, len(bodies))] {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)), MessageBody: aws.String(b)})
		}
		out, err := q.client.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
		if err != nil || len(out.Failed) > 0 {
			t.Fatalf("send: %v %+v", err, out)
		}
	}

	done := map[string]bool{} // bodies whose key is known COMPLETED
	invocations, timeouts, reported, empty := 0, 0, 0, 0
	for empty < 3 {
		if ctx.Err() != nil {
			t.Fatalf("not drained in time: %d bodies done", len(done))
		}
		ms, ev := q.receive(10)
		if len(ms) == 0 {
			empty++
			continue
		}
		empty = 0
		invocations++
		inv := f.Invoke(ctx, ev)
		if inv.TimedOut {
			timeouts++
			q.returnAll(ms)
			continue
		}
		failed := failures(t, inv)
		reported += len(failed)
		for _, m := range ms { // first against what was known before this invocation
			id, body := aws.ToString(m.MessageId), aws.ToString(m.Body)
			if !slices.Contains(failed, id) {
				continue
			}
			if done[body] {
				t.Errorf("record %s (%s) reported though its key was COMPLETED before the invocation", id, body)
			}
			// Copies within a batch run one after the other and copies
			// in different batches see the first's result: the only
			// record that must come back is the one whose key the
			// stopped invocation still holds.
			if body != slowBody {
				t.Errorf("record %s (%s) reported; only the record held by the stopped invocation must come back", id, body)
			}
		}
		for _, m := range ms {
			id, body := aws.ToString(m.MessageId), aws.ToString(m.Body)
			if !slices.Contains(failed, id) && !done[body] {
				key, _, _ := dedup.BodyKey("onceq", []byte(body))
				if r, err := store.Get(ctx, key); err != nil || r.Status != dedup.StatusCompleted {
					t.Errorf("record %s (%s) not reported, but its key is %v (%v)", id, body, r.Status, err)
				}
				done[body] = true
			}
		}
		q.settle(ms, failed)
	}
	if timeouts != 1 {
		t.Errorf("%d invocations timed out, want 1", timeouts)
	}
	eff := tb.Effects(t)
	if len(eff) != unique {
		t.Errorf("%d effects, want %d", len(eff), unique)
	}
	for id, n := range eff {
		if n != 1 {
			t.Errorf("effect %s applied %d times", id, n)
		}
	}
	t.Logf("%d invocations (%d timed out), %d records reported back, %d effects", invocations, timeouts, reported, len(eff))
}
