package sqslambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/lambdatest"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/lambda/sqslambda"
	"github.com/onceq/onceq/sources/sqssource"
)

// queue is a queue on the SQS emulator that the test polls as Lambda's
// event source mapping would.
type queue struct {
	t      testing.TB
	client *awssqs.Client
	url    string
	name   string
}

func newQueue(t testing.TB, name string, fifo bool) *queue {
	t.Helper()
	ep := testenv.SQSEndpoint(t)
	client := awssqs.NewFromConfig(awstest.Config(t, ep))
	name = fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	attrs := map[string]string{"VisibilityTimeout": "30"}
	if fifo {
		name += ".fifo"
		attrs["FifoQueue"] = "true"
	}
	out, err := client.CreateQueue(t.Context(), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	return &queue{t: t, client: client, url: aws.ToString(out.QueueUrl), name: name}
}

// send sends a body, with an idempotency-key attribute when key is set,
// and in a message group on a FIFO queue; it returns the MessageId.
func (q *queue) send(body, key, group string) string {
	q.t.Helper()
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String(body)}
	if key != "" {
		in.MessageAttributes = map[string]types.MessageAttributeValue{
			"idempotency-key": {DataType: aws.String("String"), StringValue: aws.String(key)}}
	}
	if group != "" {
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(fmt.Sprintf("%d", time.Now().UnixNano()))
	}
	out, err := q.client.SendMessage(q.t.Context(), in)
	if err != nil {
		q.t.Fatalf("send: %v", err)
	}
	return aws.ToString(out.MessageId)
}

// receive takes up to max messages and makes them an SQS event, as the
// event source mapping does.
func (q *queue) receive(max int) ([]types.Message, events.SQSEvent) {
	q.t.Helper()
	out, err := q.client.ReceiveMessage(q.t.Context(), &awssqs.ReceiveMessageInput{
		QueueUrl: aws.String(q.url), MaxNumberOfMessages: int32(max), WaitTimeSeconds: 1,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		q.t.Fatalf("receive: %v", err)
	}
	return out.Messages, q.event(out.Messages)
}

func (q *queue) event(ms []types.Message) events.SQSEvent {
	var ev events.SQSEvent
	for _, m := range ms {
		r := events.SQSMessage{
			MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
			Md5OfBody: aws.ToString(m.MD5OfBody), Attributes: m.Attributes,
			EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:" + q.name, EventSource: "aws:sqs", AWSRegion: "us-east-1",
		}
		for k, v := range m.MessageAttributes {
			if r.MessageAttributes == nil {
				r.MessageAttributes = map[string]events.SQSMessageAttribute{}
			}
			r.MessageAttributes[k] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue}
		}
		ev.Records = append(ev.Records, r)
	}
	return ev
}

// settle does what the event source mapping does with a response: it
// deletes the records not reported and makes the reported ones visible
// again at once (the queue's visibility timeout, shortened for the test).
func (q *queue) settle(ms []types.Message, failed []string) {
	q.t.Helper()
	for _, m := range ms {
		if slices.Contains(failed, aws.ToString(m.MessageId)) {
			_, err := q.client.ChangeMessageVisibility(q.t.Context(), &awssqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(q.url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
			if err != nil {
				q.t.Fatalf("change visibility: %v", err)
			}
			continue
		}
		if _, err := q.client.DeleteMessage(q.t.Context(), &awssqs.DeleteMessageInput{QueueUrl: aws.String(q.url), ReceiptHandle: m.ReceiptHandle}); err != nil {
			q.t.Fatalf("delete: %v", err)
		}
	}
}

func (q *queue) returnAll(ms []types.Message) {
	ids := make([]string, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, aws.ToString(m.MessageId))
	}
	q.settle(ms, ids)
}

func failures(t testing.TB, inv lambdatest.Invocation) []string {
	t.Helper()
	if inv.TimedOut || inv.ErrMessage != "" {
		t.Fatalf("invocation failed: %s", inv.Body)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(inv.Body, &resp); err != nil {
		t.Fatalf("response %s: %v", inv.Body, err)
	}
	ids := []string{}
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	slices.Sort(ids)
	return ids
}

func sorted(ids ...string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// TestSQSDuplicatesPoisonAndRetry: duplicates within a batch and across
// batches take effect once, a poison record goes to the dead-letter queue
// and is not reported, a failing record is reported.
func TestSQSDuplicatesPoisonAndRetry(t *testing.T) {
	t.Parallel()
	tb := lambdatest.NewTables(t)
	q, dlq := newQueue(t, "lambda-dups", false), newQueue(t, "lambda-dups-dlq", false)
	env := tb.Env()
	env["TESTFUNC_SQS_ENDPOINT"], env["TESTFUNC_DLQ_URL"] = testenv.SQSEndpoint(t), dlq.url
	f := lambdatest.Start(t, bootstrap, 30, env)
	ctx := testenv.Context(t, time.Minute)

	a1 := q.send(`{"id":"a"}`, "", "")
	a2 := q.send(`{"id":"a"}`, "", "")              // the same body: a duplicate
	b1 := q.send(`{"id":"b"}`, "order-b", "")       // keyed by attribute
	b2 := q.send(`{"id":"b","x":1}`, "order-b", "") // same key, another body: key reuse, a dead letter
	p := q.send(`{"id":"p","poison":true}`, "", "")
	x := q.send(`{"id":"x","fail":true}`, "", "")

	var all []types.Message
	for len(all) < 6 {
		ms, _ := q.receive(10)
		all = append(all, ms...)
	}
	got := failures(t, f.Invoke(ctx, q.event(all)))
	// Only x comes back: the copies in the batch run one after the other,
	// so the second is a duplicate; the poison record is dead-lettered.
	if !slices.Equal(got, []string{x}) {
		t.Errorf("reported %v, want only the failing record %s (a1=%s a2=%s b1=%s p=%s)", got, x, a1, a2, b1, p)
	}
	q.settle(all, got)

	// A copy sent again, in a later batch, is a duplicate; x keeps failing.
	sendAgain := q.send(`{"id":"a"}`, "", "")
	for round := 0; round < 10; round++ {
		ms, ev := q.receive(10)
		if len(ms) == 0 {
			break
		}
		got := failures(t, f.Invoke(ctx, ev))
		for _, id := range got {
			if id != x {
				t.Errorf("round %d: reported %s; only x may come back", round, id)
			}
		}
		var keep []types.Message
		for _, m := range ms {
			if aws.ToString(m.MessageId) != x {
				keep = append(keep, m)
			}
		}
		q.settle(keep, nil) // x is left out: it fails forever
	}
	_ = sendAgain
	eff := tb.Effects(t)
	if eff["a"] != 1 || eff["b"] != 1 || eff["p"] != 0 || eff["x"] != 0 {
		t.Errorf("effects %v, want a=1 b=1 and none for p or x", eff)
	}
	dl, _ := dlq.receive(10)
	var reasons []string
	for _, m := range dl {
		reasons = append(reasons, aws.ToString(m.MessageAttributes[sqssource.ReasonAttribute].StringValue))
		// b1 and b2 share a key with different bodies: whichever of the
		// two ran second is the key reuse.
		if id := aws.ToString(m.MessageAttributes[sqssource.OriginalIDAttribute].StringValue); id != p && id != b1 && id != b2 {
			t.Errorf("dead letter of %s; want only the poison record %s and one of the key reuses %s, %s", id, p, b1, b2)
		}
	}
	if len(dl) != 2 {
		t.Errorf("%d dead letters (%v), want 2: the poison record and the reused key", len(dl), reasons)
	}
}

// TestSQSNoDeadLetterDestination: without a dead-letter queue a poison
// record is reported, kept with the queue, not dropped.
func TestSQSNoDeadLetterDestination(t *testing.T) {
	t.Parallel()
	tb := lambdatest.NewTables(t)
	q := newQueue(t, "lambda-nodlq", false)
	f := lambdatest.Start(t, bootstrap, 30, tb.Env())
	p := q.send(`{"id":"p","poison":true}`, "", "")
	_, ev := q.receive(10)
	if got := failures(t, f.Invoke(testenv.Context(t, time.Minute), ev)); !slices.Equal(got, []string{p}) {
		t.Errorf("reported %v, want the poison record %s kept", got, p)
	}
}

// TestSQSFIFOGroupOrder: once a record of a group must come back, the
// later records of that group are reported without running; other groups
// go on.
func TestSQSFIFOGroupOrder(t *testing.T) {
	t.Parallel()
	tb := lambdatest.NewTables(t)
	q := newQueue(t, "lambda-fifo", true)
	f := lambdatest.Start(t, bootstrap, 30, tb.Env())
	m1 := q.send(`{"id":"m1","fail":true}`, "", "g1")
	m2 := q.send(`{"id":"m2"}`, "", "g1")
	m3 := q.send(`{"id":"m3"}`, "", "g1")
	q.send(`{"id":"n1"}`, "", "g2")
	q.send(`{"id":"n2"}`, "", "g2")
	// The emulator hands out one message per group at a time; collect the
	// batch Lambda would get (all five, in group order) by taking each
	// message off the queue as it comes.
	var batch []types.Message
	for len(batch) < 5 {
		ms, _ := q.receive(10)
		batch = append(batch, ms...)
		q.settle(ms, nil)
	}
	got := failures(t, f.Invoke(testenv.Context(t, time.Minute), q.event(batch)))
	if want := sorted(m1, m2, m3); !slices.Equal(got, want) {
		t.Errorf("reported %v, want all of group g1 %v", got, want)
	}
	eff := tb.Effects(t)
	if eff["m2"] != 0 || eff["m3"] != 0 || eff["n1"] != 1 || eff["n2"] != 1 {
		t.Errorf("effects %v: g1 must stop at its failed record, g2 must go on", eff)
	}
}

// TestSQSFunctionTimeout: the function is stopped by its timeout in the
// middle of a batch. The record it held is PENDING no longer than the
// function could have run; the next invocation reports it while the lease
// lives, takes it over once it has ended, and its effect happens once.
func TestSQSFunctionTimeout(t *testing.T) {
	t.Parallel()
	tb := lambdatest.NewTables(t)
	q := newQueue(t, "lambda-timeout", false)
	env := tb.Env()
	env["TESTFUNC_SKEW"], env["TESTFUNC_CONCURRENCY"] = "1s", "1"
	const timeout = 3 // seconds
	f := lambdatest.Start(t, bootstrap, timeout, env)
	ctx := testenv.Context(t, time.Minute)

	q.send(`{"id":"before"}`, "", "")
	slowBody := `{"id":"slow","sleep_first_ms":8000}`
	slow := q.send(slowBody, "", "")
	q.send(`{"id":"after"}`, "", "")
	var ms []types.Message
	for len(ms) < 3 {
		got, _ := q.receive(10)
		ms = append(ms, got...)
	}
	// One at a time, in this order: before, slow, after.
	slices.SortFunc(ms, func(a, b types.Message) int {
		return strings.Index("before slow after", idOf(a)) - strings.Index("before slow after", idOf(b))
	})
	start := time.Now()
	if inv := f.Invoke(ctx, q.event(ms)); !inv.TimedOut {
		t.Fatalf("the first invocation should time out: %s", inv.Body)
	}
	q.returnAll(ms) // a timed-out invocation: the whole batch comes back

	store, err := dynamostore.New(tb.Client, dynamostore.WithTable(tb.Idempotency))
	if err != nil {
		t.Fatal(err)
	}
	key, _, _ := dedup.BodyKey("onceq", []byte(slowBody))
	rec, err := store.Get(ctx, key)
	if err != nil {
		t.Fatalf("the slow record: %v", err)
	}
	if rec.Status != dedup.StatusPending || rec.ExpiresAt.After(start.Add(timeout*time.Second)) {
		t.Fatalf("the slow record is %s until %v; want PENDING until no later than the function's end %v",
			rec.Status, rec.ExpiresAt, start.Add(timeout*time.Second))
	}

	// At once: the lease still lives, so only the slow record comes back.
	ms = receiveN(t, q, 3)
	if got := failures(t, f.Invoke(ctx, q.event(ms))); !slices.Equal(got, []string{slow}) {
		t.Fatalf("second invocation reported %v, want only the held record %s", got, slow)
	}
	q.settle(ms, []string{slow})

	// Once the lease has ended and the skew margin (1s) has passed, on
	// whole seconds, it is taken over.
	// Wall-clock time must pass for DynamoDB and the function, another
	// process: no fake clock reaches them.
	time.Sleep(time.Until(rec.ExpiresAt.Add(2200 * time.Millisecond)))
	ms = receiveN(t, q, 1)
	if got := failures(t, f.Invoke(ctx, q.event(ms))); len(got) != 0 {
		t.Fatalf("third invocation reported %v, want none", got)
	}
	q.settle(ms, nil)
	if eff := tb.Effects(t); eff["before"] != 1 || eff["slow"] != 1 || eff["after"] != 1 {
		t.Errorf("effects %v, want each once", eff)
	}
}

func idOf(m types.Message) string {
	b := aws.ToString(m.Body)
	i := strings.Index(b, `"id":"`)
	rest := b[i+6:]
	return rest[:strings.IndexByte(rest, '"')]
}

func receiveN(t testing.TB, q *queue, n int) []types.Message {
	t.Helper()
	var ms []types.Message
	deadline := time.Now().Add(10 * time.Second)
	for len(ms) < n && time.Now().Before(deadline) {
		got, _ := q.receive(10)
		ms = append(ms, got...)
	}
	if len(ms) != n {
		t.Fatalf("received %d messages, want %d", len(ms), n)
	}
	return ms
}

// TestSQSMisconfigured: a missing idempotency table fails the invocation
// as a whole and reports no record.
func TestSQSMisconfigured(t *testing.T) {
	t.Parallel()
	tb := lambdatest.NewTables(t)
	q := newQueue(t, "lambda-misconf", false)
	env := tb.Env()
	env["TESTFUNC_TABLE"] = "no-such-table"
	f := lambdatest.Start(t, bootstrap, 30, env)
	q.send(`{"id":"a"}`, "", "")
	_, ev := q.receive(10)
	inv := f.Invoke(testenv.Context(t, time.Minute), ev)
	if !strings.Contains(inv.ErrMessage, "misconfigured") {
		t.Fatalf("want the invocation to fail as misconfigured, got %s", inv.Body)
	}
	if eff := tb.Effects(t); len(eff) != 0 {
		t.Errorf("effects %v, want none", eff)
	}
}

var _ = context.Background

// TestSQSVisibility: with WithVisibility, a failed record comes back after
// its retry delay (about 3s) rather than the queue's visibility timeout
// (30s).
func TestSQSVisibility(t *testing.T) {
	t.Parallel()
	tb := lambdatest.NewTables(t)
	q := newQueue(t, "lambda-visibility", false)
	env := tb.Env()
	env["TESTFUNC_SQS_ENDPOINT"], env["TESTFUNC_QUEUE_URL"] = testenv.SQSEndpoint(t), q.url
	f := lambdatest.Start(t, bootstrap, 30, env)
	x := q.send(`{"id":"x","fail":true}`, "", "")
	_, ev := q.receive(10)
	if got := failures(t, f.Invoke(testenv.Context(t, time.Minute), ev)); !slices.Equal(got, []string{x}) {
		t.Fatalf("reported %v, want %s", got, x)
	}
	// Not settled: the record's visibility is what the function left.
	deadline := time.Now().Add(15 * time.Second) // half the queue's visibility timeout
	for time.Now().Before(deadline) {
		if ms, _ := q.receive(10); len(ms) == 1 && aws.ToString(ms[0].MessageId) == x {
			return
		}
	}
	t.Fatalf("the failed record did not come back within 15s; the queue's visibility timeout is 30s")
}

// A commit that stalls past the deadline does not make the invocation time
// out: the store call is cancelled in time to answer, and its record is
// reported as a failure, its effect not applied.
func TestSQSStalledStoreAnswersInTime(t *testing.T) {
	t.Parallel()
	tb := lambdatest.NewTables(t)
	proxy := faultproxy.Start(t, tb.Endpoint)
	proxy.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Fault: faultproxy.Latency, Delay: time.Minute})
	q := newQueue(t, "lambda-stalled", false)
	env := tb.Env()
	env["TESTFUNC_DDB_ENDPOINT"] = proxy.URL()
	const timeout = 3 // seconds
	f := lambdatest.Start(t, bootstrap, timeout, env)

	id := q.send(`{"id":"stalled"}`, "", "")
	ms := receiveN(t, q, 1)
	start := time.Now()
	inv := f.Invoke(testenv.Context(t, time.Minute), q.event(ms))
	took := time.Since(start)
	if got := failures(t, inv); !slices.Equal(got, []string{id}) {
		t.Fatalf("reported %v, want the record whose commit stalled, %s", got, id)
	}
	if took >= timeout*time.Second {
		t.Errorf("answered after %v, past the %ds deadline", took, timeout)
	}
	if n := proxy.Requests("TransactWriteItems"); n != 1 {
		t.Fatalf("%d commits reached the store, want the one that stalled", n)
	}
	if eff := tb.Effects(t); eff["stalled"] != 0 {
		t.Errorf("effects %v: the stalled commit must not have applied", eff)
	}
}

// TestSQSDeadLetterReasonCleaned: the Lambda dead letter cleans its reason
// of control characters, as the SQS source does, so a handler error with
// escape sequences neither fails the send nor reaches whoever reads it.
func TestSQSDeadLetterReasonCleaned(t *testing.T) {
	t.Parallel()
	q, dlq := newQueue(t, "lambda-reason", false), newQueue(t, "lambda-reason-dlq", false)
	q.send(`{"id":"r"}`, "", "")
	ms, ev := q.receive(1)
	if len(ms) != 1 {
		t.Fatalf("received %d messages, want 1", len(ms))
	}
	reason := "bad \x1b]0;owned\x07 \x1b[31mred\x00 \x9b2J end"
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{}, consumer.Permanent(errors.New(reason))
	})
	f, err := sqslambda.New(memstoretest.New(t), h, sqslambda.DeadLetterQueue(q.client, dlq.url))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.Handle(testenv.Context(t, 30*time.Second), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("response %+v, %v: want the record dead-lettered, not reported", resp, err)
	}
	dl, _ := dlq.receive(1)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	got := aws.ToString(dl[0].MessageAttributes[sqssource.ReasonAttribute].StringValue)
	for _, r := range got {
		if r < 0x20 || r == 0x7F || (r >= 0x80 && r < 0xA0) {
			t.Fatalf("reason %q carries control character %U", got, r)
		}
	}
	if !strings.Contains(got, "end") {
		t.Errorf("reason %q lost its text", got)
	}
}

// A store that does not answer makes the invocation say so in its log,
// naming the table and the endpoint, what it waited for and for how long,
// and give its records back (reported, not failed), in time to answer:
// whether it hangs in the first invocation's check (no fault of the
// deployment, which would fail the invocation) or in the claims. Once it
// answers, that is said, and the records are done.
func TestSQSStoreDownLogged(t *testing.T) {
	t.Parallel()
	tb := lambdatest.NewTables(t)
	proxy := faultproxy.Start(t, tb.Endpoint)
	q := newQueue(t, "lambda-storedown", false)
	env := tb.Env()
	env["TESTFUNC_DDB_ENDPOINT"] = proxy.URL()
	f := lambdatest.Start(t, bootstrap, 30, env)
	ctx := testenv.Context(t, 2*time.Minute)
	store := "DynamoDB table " + tb.Idempotency + " (" + proxy.URL() + ")"
	a, b := q.send(`{"id":"a"}`, "", ""), q.send(`{"id":"b"}`, "", "")
	logged := func(what, waiting string) {
		t.Helper()
		line := lineWith(f.Log(), what+"|"+waiting)
		for _, want := range []string{store, "waited="} {
			if !strings.Contains(line, want) {
				t.Errorf("line %q: want %q in it", line, want)
			}
		}
	}

	// Every write hangs (the store calls end at their 10s deadline): the
	// check's probe write first.
	proxy.AddRule(faultproxy.Rule{Op: "PutItem", Table: tb.Idempotency, Fault: faultproxy.Latency, Delay: time.Minute})
	ms := receiveN(t, q, 2)
	if got := failures(t, f.Invoke(ctx, q.event(ms))); !slices.Equal(got, sorted(a, b)) {
		t.Fatalf("store down at the check: reported %v, want both records given back: %v", got, sorted(a, b))
	}
	q.returnAll(ms)
	logged("waiting for the store", "waiting_for=Check")
	logged("store unavailable", "waiting_for=Check")
	if line := lineWith(f.Log(), "store unavailable|waiting_for=Check"); strings.Contains(line, "misconfigured") {
		t.Errorf("line %q: a store that does not answer is not a fault of the deployment", line)
	}

	// The check's probe passes; every claim hangs.
	proxy.ClearRules()
	proxy.AddRule(faultproxy.Rule{Op: "PutItem", Table: tb.Idempotency, Fault: faultproxy.Latency, Delay: time.Minute,
		Body: func(body []byte) bool { return !strings.Contains(string(body), "onceq-check#") }})
	ms = receiveN(t, q, 2)
	if got := failures(t, f.Invoke(ctx, q.event(ms))); !slices.Equal(got, sorted(a, b)) {
		t.Fatalf("store down at the claims: reported %v, want both records given back: %v", got, sorted(a, b))
	}
	q.returnAll(ms)
	logged("store unavailable", "waiting_for=Claim")

	proxy.ClearRules()
	ms = receiveN(t, q, 2)
	if got := failures(t, f.Invoke(ctx, q.event(ms))); len(got) != 0 {
		t.Fatalf("store back: reported %v, want none", got)
	}
	q.settle(ms, nil)
	if line := lineWith(f.Log(), "store reachable again"); !strings.Contains(line, store) {
		t.Errorf("line %q: want the store back, named %s", line, store)
	}
	if eff := tb.Effects(t); eff["a"] != 1 || eff["b"] != 1 {
		t.Errorf("effects %v, want each once", eff)
	}
}

// lineWith is the first line of log that holds each of the |-separated
// strings of s.
func lineWith(log, s string) string {
	for line := range strings.Lines(log) {
		all := true
		for w := range strings.SplitSeq(s, "|") {
			all = all && strings.Contains(line, w)
		}
		if all {
			return line
		}
	}
	return ""
}
