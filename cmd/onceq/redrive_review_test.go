package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/cmd/onceq/internal/redrive"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// redriveKafka is a client of the test's brokers that creates the topics
// it produces to, closed when the test ends.
func redriveKafka(t *testing.T, brokers string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// deadLetters produces to dlt one dead letter per record key, as
// kafkagroup dead-letters a record read from orig, and returns the stored
// key of each letter's message (the consumer's, under namespace onceq).
func deadLetters(t *testing.T, cl *kgo.Client, orig, dlt string, keys ...string) []string {
	t.Helper()
	var recs []*kgo.Record
	var stored []string
	for i, k := range keys {
		value := []byte(`{"n":` + string(rune('0'+i)) + `}`)
		recs = append(recs, &kgo.Record{Topic: dlt, Key: []byte(k), Value: value, Headers: []kgo.RecordHeader{
			{Key: kafkagroup.ReasonHeader, Value: []byte("poison")}, {Key: kafkagroup.OriginalTopicHeader, Value: []byte(orig)},
			{Key: kafkagroup.OriginalPartitionHeader, Value: []byte("0")}, {Key: kafkagroup.OriginalOffsetHeader, Value: []byte("7")}}})
		key, err := redrive.RecordKeys("onceq")(&broker.Message{OrderingKey: k, Body: value, Origin: broker.Origin{Destination: orig}})
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, key)
	}
	// The original topic exists, as it would: its first record is there.
	if err := cl.ProduceSync(t.Context(), append([]*kgo.Record{{Topic: orig, Key: []byte("first")}}, recs...)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return stored
}

// readTopic returns the records of topic but its first, once want have
// come.
func readTopic(t *testing.T, brokers, topic string, want int) []*kgo.Record {
	t.Helper()
	rd, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < want && ctx.Err() == nil {
		for _, r := range rd.PollFetches(ctx).Records() {
			if string(r.Key) != "first" {
				got = append(got, r)
			}
		}
	}
	if len(got) < want {
		t.Fatalf("%s holds %d records beside its first, want %d", topic, len(got), want)
	}
	return got
}

// A Kafka dead letter whose key a worker holds is "left for a later run"
// (docs/cli.md): once the worker has dead-lettered it for good, the next
// run in the same group moves it. Neither its offset nor that of a letter
// after it in its partition (one the run moved) may be committed while it
// is held, or the group never reads it again.
func TestReviewRedriveKafkaHeldLetterMovedByALaterRun(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	s := redriveStores(t)["postgres"](t)
	name := tableName(t)
	orig, dlt := name+"-orders", name+"-orders-dlt"
	cl := redriveKafka(t, brokers)
	// The same record key: one partition, the held letter first.
	keys := deadLetters(t, cl, orig, dlt, "order-held", "order-held")
	now := time.Now()
	c, err := s.st.Claim(t.Context(), dedup.ClaimRequest{Key: keys[0], Owner: "w", Now: now, LeaseUntil: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"redrive"}, s.args...), "-kafka-dlt", dlt, "-kafka-brokers", brokers)
	code, out, errOut := onceq(args...)
	if code != 0 || !strings.Contains(out, "2 looked at: moved 1, 0 completed (not re-run), 1 held by a worker") {
		t.Fatalf("first redrive: exit %d, %s\n%s", code, out, errOut)
	}
	// The worker gives up on it: its record is dead-lettered.
	if err := s.st.Fail(t.Context(), dedup.FailRequest{Lease: c.Lease, Reason: "poison", Now: time.Now(), RetryAt: time.Now().Add(time.Hour), DeadLetter: true}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = onceq(args...)
	moved := `msg="redrive: moved" id=` + dlt
	if code != 0 || !strings.Contains(errOut, moved) || !strings.Contains(errOut[strings.Index(errOut, moved):], "key_hash="+dedup.KeyHash(keys[0])+" ") {
		t.Fatalf("redrive after the worker let go: exit %d, %s\n%s\nwant the held letter moved now", code, out, errOut)
	}
	found := false
	for _, r := range readTopic(t, brokers, orig, 2) {
		found = found || string(r.Value) == `{"n":0}`
	}
	if !found {
		t.Fatal("the held letter is not in the original topic")
	}
	if r, err := s.st.Get(t.Context(), keys[0]); err != nil || r.Status != dedup.StatusFailed {
		t.Fatalf("record after the move: %+v %v, want reset", r, err)
	}
}

// -kafka-topic sends the letters elsewhere, but the record that says
// whether a letter's effect committed is the one of the topic it was read
// from (its onceq-original-topic header): a letter whose effect committed
// there is not re-run through another topic.
func TestReviewRedriveKafkaTopicOverrideKeepsCompleted(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	s := redriveStores(t)["postgres"](t)
	name := tableName(t)
	orig, dlt, retry := name+"-orders", name+"-orders-dlt", name+"-orders-retry"
	cl := redriveKafka(t, brokers)
	keys := deadLetters(t, cl, orig, dlt, "order-done", "order-failed")
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: retry, Key: []byte("first")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := s.st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: keys[0], Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"redrive"}, s.args...), "-kafka-dlt", dlt, "-kafka-brokers", brokers, "-kafka-topic", retry)
	code, out, errOut := onceq(args...)
	if code != 0 || !strings.Contains(out, "2 looked at: moved 1, 1 completed (not re-run)") {
		t.Fatalf("redrive to %s: exit %d, %s\n%s\nwant the completed letter not re-run", retry, code, out, errOut)
	}
	if got := readTopic(t, brokers, retry, 1); string(got[0].Key) != "order-failed" {
		t.Fatalf("%s holds %q, want order-failed", retry, got[0].Key)
	}
}

// sqsPair is a source queue and its dead-letter queue, deleted after t.
func sqsPair(t *testing.T, q *awssqs.Client) (qn, src, dlq string) {
	t.Helper()
	qn = "onceq-redrive-" + tableName(t)[len("onceq_cli_"):]
	src, _ = createQueue(t, q, qn, nil)
	dlq, _ = createQueue(t, q, qn+"-dlq", nil)
	t.Cleanup(func() {
		for _, u := range []string{src, dlq} {
			_, _ = q.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		}
	})
	return qn, src, dlq
}

// fifoPair is a FIFO source queue and its FIFO dead-letter queue, named
// after qn, deleted at the end of the test.
func fifoPair(t *testing.T, q *awssqs.Client) (qn, src, dlq string) {
	t.Helper()
	qn = "onceq-redrive-" + tableName(t)[len("onceq_cli_"):]
	fifo := map[string]string{"FifoQueue": "true"}
	src, _ = createQueue(t, q, qn+".fifo", fifo)
	dlq, _ = createQueue(t, q, qn+"-dlq.fifo", fifo)
	t.Cleanup(func() {
		for _, u := range []string{src, dlq} {
			_, _ = q.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		}
	})
	return qn, src, dlq
}

// A run looks at each dead letter once, even when a letter it left comes
// back into sight while it runs (-hold shorter than the run): it ends,
// and its report counts the letter once.
func TestReviewRedriveSQSLetterBackInSightLookedAtOnce(t *testing.T) {
	q := localSQS(t)
	s := redriveStores(t)["redis"](t)
	_, src, dlq := sqsPair(t, q)
	key := "done-" + tableName(t)
	now := time.Now()
	if _, err := s.st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: mustKey(t, "onceq", key), Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: aws.String("b"),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{broker.IdempotencyKeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(key)}}}); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"redrive"}, s.args...), "-sqs-dlq", dlq, "-sqs-source", src)
	if code, _, errOut := onceq(append(args, "-hold", "500ms")...); code != 1 || !strings.Contains(errOut, "hold 500ms: want 1s to 12h") {
		t.Fatalf("redrive -hold 500ms: exit %d, %s; want refused (SQS hides nothing for less than a second)", code, errOut)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, append(args, "-hold", "1s"), &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "1 looked at: moved 0, 1 completed (not re-run)") {
		t.Fatalf("redrive -hold 1s: exit %d, %s\n%s\nwant it to end, the letter looked at once", code, out.String(), errOut.String())
	}
	if n := queueDepth(t, q, dlq); n != 1 {
		t.Fatalf("the dead-letter queue holds %d, want the completed letter", n)
	}
}

// Two redrives of one Kafka dead-letter topic at once, in the same group,
// move each letter once: the group hands each partition to one of them.
func TestReviewRedriveKafkaTwoAtOnce(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	s := redriveStores(t)["redis"](t)
	name := tableName(t)
	orig, dlt := name+"-orders", name+"-orders-dlt"
	cl := redriveKafka(t, brokers)
	const n = 40
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("order-%d", i)
	}
	deadLetters(t, cl, orig, dlt, keys...)
	args := append(append([]string{"redrive"}, s.args...), "-kafka-dlt", dlt, "-kafka-brokers", brokers)
	var wg sync.WaitGroup
	var outs [2]string
	for i := range outs {
		wg.Go(func() {
			var out, errOut bytes.Buffer
			if code := run(t.Context(), args, &out, &errOut); code != 0 {
				t.Errorf("redrive %d: exit %d: %s", i, code, errOut.String())
			}
			outs[i] = out.String()
		})
	}
	wg.Wait()
	moved := 0
	for _, o := range outs {
		var seen, m int
		if _, err := fmt.Sscanf(o, "onceq redrive: %d looked at: moved %d", &seen, &m); err != nil {
			t.Fatalf("summary %q: %v", o, err)
		}
		moved += m
	}
	got := map[string]int{}
	for _, r := range readTopic(t, brokers, orig, n) {
		got[string(r.Key)]++
	}
	if moved != n || len(got) != n {
		t.Fatalf("two redrives moved %d (summaries %q); the original topic got %v; want each of %d once", moved, outs, got, n)
	}
	for k, c := range got {
		if c != 1 {
			t.Fatalf("%s sent back %d times (summaries %q)", k, c, outs)
		}
	}
}

// -rate NaN is a usage error, as a negative rate is.
func TestReviewRedriveRateNaN(t *testing.T) {
	code, _, errOut := onceq("redrive", "-store", "postgres", "-outbox", "-rate", "NaN")
	if code != 2 || !strings.Contains(errOut, "-rate NaN") {
		t.Fatalf("onceq redrive -rate NaN: exit %d, %q; want 2 naming the rate", code, errOut)
	}
}

// A FIFO dead-letter queue returns none of a group's letters while one of
// them is out of sight: a letter the run leaves (here, one whose effect
// committed, first in its group) must not hide the letters behind it.
// Twelve letters of one group, the first completed: one run moves the
// other eleven, each once, in order.
func TestReviewRedriveSQSFIFOLetterLeftDoesNotHideItsGroup(t *testing.T) {
	q := localSQS(t)
	s := redriveStores(t)["redis"](t)
	qn, src, dlq := fifoPair(t, q)
	const n = 12
	now := time.Now()
	for i := range n {
		key := fmt.Sprintf("%s-%02d", qn, i)
		if i == 0 {
			if _, err := s.st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: mustKey(t, "onceq", key), Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := q.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: aws.String(key),
			MessageGroupId: aws.String("customer-7"), MessageDeduplicationId: aws.String(key),
			MessageAttributes: map[string]sqstypes.MessageAttributeValue{broker.IdempotencyKeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(key)}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := onceq(append(append([]string{"redrive"}, s.args...), "-sqs-dlq", dlq, "-sqs-source", src)...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d looked at: moved %d, 1 completed (not re-run)", n, n-1)) {
		t.Fatalf("redrive: exit %d, %s\n%s\nwant the %d letters behind the completed one moved", code, out, errOut, n-1)
	}
	var bodies []string
	for _, m := range drain(t, q, src, n-1) {
		bodies = append(bodies, aws.ToString(m.Body))
	}
	for i, b := range bodies {
		if want := fmt.Sprintf("%s-%02d", qn, i+1); b != want {
			t.Fatalf("source queue got %q, want %s-01 to -%02d in order", bodies, qn, n-1)
		}
	}
}

// Two redrives of one FIFO dead-letter queue at once end, and move each
// letter once: a letter one sends to the back of its group is newer than
// the other run, which leaves it where it is.
func TestReviewRedriveSQSFIFOTwoAtOnce(t *testing.T) {
	q := localSQS(t)
	s := redriveStores(t)["redis"](t)
	qn, src, dlq := fifoPair(t, q)
	const n = 6
	now := time.Now()
	for i := range n {
		key := fmt.Sprintf("%s-%02d", qn, i)
		if i%3 == 0 {
			if _, err := s.st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: mustKey(t, "onceq", key), Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := q.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: aws.String(key),
			MessageGroupId: aws.String(fmt.Sprint("g", i%2)), MessageDeduplicationId: aws.String(key),
			MessageAttributes: map[string]sqstypes.MessageAttributeValue{broker.IdempotencyKeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(key)}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	args := append(append([]string{"redrive"}, s.args...), "-sqs-dlq", dlq, "-sqs-source", src)
	var wg sync.WaitGroup
	var outs [2]string
	for i := range outs {
		wg.Go(func() {
			var out, errOut bytes.Buffer
			if code := run(ctx, args, &out, &errOut); code != 0 {
				t.Errorf("redrive %d: exit %d: %s", i, code, errOut.String())
			}
			outs[i] = out.String()
		})
	}
	wg.Wait()
	moved := 0
	for _, o := range outs {
		var seen, m int
		if _, err := fmt.Sscanf(o, "onceq redrive: %d looked at: moved %d", &seen, &m); err != nil {
			t.Fatalf("summary %q: %v", o, err)
		}
		moved += m
	}
	got := map[string]int{}
	for _, m := range drain(t, q, src, n-2) {
		got[aws.ToString(m.Body)]++
	}
	if moved != n-2 || len(got) != n-2 {
		t.Fatalf("two redrives moved %d (summaries %q); the source queue got %v; want the %d not completed once each", moved, outs, got, n-2)
	}
	if d := queueDepth(t, q, dlq); d != 2 {
		t.Fatalf("the dead-letter queue holds %d, want the 2 completed letters", d)
	}
}

// A Kafka dead letter without the original-topic header (written by a
// producer other than onceq's) names nowhere to go back to. The run says
// so and goes on with the letters behind it; the letter is left, and a
// later run in the same group that names a topic (-kafka-topic) finds it
// and sends it there.
func TestReviewRedriveKafkaLetterWithoutOriginalTopic(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	s := redriveStores(t)["postgres"](t)
	name := tableName(t)
	orig, dlt := name+"-orders", name+"-orders-dlt"
	cl := redriveKafka(t, brokers)
	// The same record key: one partition, the headerless letter first.
	foreign := &kgo.Record{Topic: dlt, Key: []byte("order-1"), Value: []byte(`{"foreign":true}`),
		Headers: []kgo.RecordHeader{{Key: kafkagroup.ReasonHeader, Value: []byte("poison")}}}
	if err := cl.ProduceSync(t.Context(), foreign).FirstErr(); err != nil {
		t.Fatal(err)
	}
	deadLetters(t, cl, orig, dlt, "order-1")
	args := append(append([]string{"redrive"}, s.args...), "-kafka-dlt", dlt, "-kafka-brokers", brokers)
	code, out, errOut := onceq(args...)
	if code != 0 || !strings.Contains(out, "2 looked at: moved 1,") || !strings.Contains(out, "1 naming nowhere to go back to (left)") {
		t.Fatalf("first redrive: exit %d, %s\n%s\nwant the onceq letter moved and the foreign one left", code, out, errOut)
	}
	if got := readTopic(t, brokers, orig, 1); string(got[0].Value) != `{"n":0}` {
		t.Fatalf("%s holds %q, want the onceq letter", orig, got[0].Value)
	}
	// The letter behind the left one is read again too (no offset is
	// committed past a letter left), and sent again: no worker ran it in
	// between, and a consumer absorbs the copy under the same key.
	code, out, errOut = onceq(append(args, "-kafka-topic", orig)...)
	if code != 0 || !strings.Contains(out, "2 looked at: moved 2,") || !strings.Contains(out, "0 naming nowhere") {
		t.Fatalf("redrive naming -kafka-topic: exit %d, %s\n%s\nwant the foreign letter moved", code, out, errOut)
	}
	found := false
	for _, r := range readTopic(t, brokers, orig, 3) {
		found = found || string(r.Value) == `{"foreign":true}`
	}
	if !found {
		t.Fatalf("the foreign letter is not in %s", orig)
	}
}

// A dry run writes nothing to a FIFO dead-letter queue: no letter goes
// to the back of its group (a new message, with a new ID and a new sent
// time, in place of the old). Right after it the letters are in sight,
// each with its own ID, and the real run that follows moves them, in
// order.
func TestRedriveSQSFIFODryRunWritesNothing(t *testing.T) {
	q := localSQS(t)
	s := redriveStores(t)["redis"](t)
	qn, src, dlq := fifoPair(t, q)
	const n = 6
	now := time.Now()
	var ids []string
	for i := range n {
		key := fmt.Sprintf("%s-%02d", qn, i)
		if i == 0 {
			if _, err := s.st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: mustKey(t, "onceq", key), Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		out, err := q.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: aws.String(key),
			MessageGroupId: aws.String("customer-7"), MessageDeduplicationId: aws.String(key),
			MessageAttributes: map[string]sqstypes.MessageAttributeValue{broker.IdempotencyKeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(key)}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, aws.ToString(out.MessageId))
	}
	args := append(append([]string{"redrive"}, s.args...), "-sqs-dlq", dlq, "-sqs-source", src)
	// It looks at the front of the group, at least the completed first
	// letter, and counts the letters behind, which it cannot see without
	// moving the ones before.
	code, out, errOut := onceq(append(args, "-dry-run")...)
	var seen, moved, unseen int
	if _, err := fmt.Sscanf(out, "onceq redrive: %d looked at: would move %d, 1 completed", &seen, &moved); err != nil || code != 0 || seen < 1 || moved != seen-1 {
		t.Fatalf("dry run: exit %d, %s\n%s", code, out, errOut)
	}
	if seen < n {
		_, after, _ := strings.Cut(out, "(left), about ")
		if _, err := fmt.Sscanf(after, "%d not looked at", &unseen); err != nil || seen+unseen != n {
			t.Fatalf("dry run: %s; want the %d letters it did not look at counted", out, n-seen)
		}
	}
	// In sight, each letter as it was: a receive hands out the front of
	// the group, the letters first sent.
	rec, err := q.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(dlq), MaxNumberOfMessages: 10, VisibilityTimeout: 5})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range rec.Messages {
		got = append(got, aws.ToString(m.MessageId))
		if _, err := q.ChangeMessageVisibility(t.Context(), &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(dlq), ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) == 0 || strings.Join(got, ",") != strings.Join(ids[:len(got)], ",") || queueDepth(t, q, dlq) != n {
		t.Fatalf("after the dry run the dead-letter queue hands out %q, want its letters as sent, %q, all %d there", got, ids, n)
	}
	code, out, errOut = onceq(args...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d looked at: moved %d, 1 completed (not re-run)", n, n-1)) {
		t.Fatalf("the run after the dry run: exit %d, %s\n%s", code, out, errOut)
	}
	for i, m := range drain(t, q, src, n-1) {
		if want := fmt.Sprintf("%s-%02d", qn, i+1); aws.ToString(m.Body) != want {
			t.Fatalf("source queue's letter %d is %q, want %s", i, aws.ToString(m.Body), want)
		}
	}
}
