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
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/sqssource"
)

func TestRedriveUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"redrive", "-store", "postgres"}, "give one of -sqs-dlq, -kafka-dlt and -outbox"},
		{[]string{"redrive", "-store", "postgres", "-outbox", "-sqs-dlq", "u"}, "give one of"},
		{[]string{"redrive", "-store", "redis", "-outbox"}, "keeps no outbox"},
		{[]string{"redrive", "-store", "postgres", "-kafka-dlt", "t"}, "needs -kafka-brokers"},
		{[]string{"redrive", "-store", "postgres", "-outbox", "-kafka-group", "g"}, "go with -kafka-dlt"},
		{[]string{"redrive", "-store", "postgres", "-outbox", "-sqs-source", "u"}, "go with -sqs-dlq"},
		{[]string{"redrive", "-store", "postgres", "-outbox", "-key-hash", "nothex"}, `key_hash "nothex"`},
		{[]string{"redrive", "-store", "postgres", "-outbox", "-max", "-1"}, "max -1"},
		{[]string{"redrive", "-store", "postgres", "-outbox", "-rate", "-2"}, "-rate -2"},
		{[]string{"redrive", "-outbox"}, "-table is required"},
	} {
		code, _, errOut := onceq(c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("onceq %s: exit %d, %q; want 2 and %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}

// redriveStore is a store with its table ready, as onceq's flags name it.
type redriveStore struct {
	args []string
	st   dedup.Store
}

func redriveStores(t *testing.T) map[string]func(t *testing.T) redriveStore {
	return map[string]func(t *testing.T) redriveStore{
		"dynamodb": func(t *testing.T) redriveStore {
			table, st := newTable(t, false)
			return redriveStore{args: []string{"-table", table}, st: st}
		},
		"postgres": func(t *testing.T) redriveStore {
			url := testenv.PostgresURL(t)
			conn, table := pgTable(t, url)
			st, err := pgstore.New(conn, pgstore.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			return redriveStore{args: []string{"-store", "postgres", "-postgres-url", url, "-table", table}, st: st}
		},
		"redis": func(t *testing.T) redriveStore {
			addr := testenv.RedisAddr(t)
			prefix := "onceqcli:" + tableName(t) + ":"
			st, err := redisstore.New(redisUnder(t, addr, prefix), redisstore.Prefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			return redriveStore{args: []string{"-store", "redis", "-redis-addr", addr, "-redis-prefix", prefix}, st: st}
		},
	}
}

// The records of the four kinds of dead letter, by the idempotency key
// each carries: one whose effect committed, one that failed, one with no
// record, one a worker holds.
func redriveRecords(t *testing.T, st dedup.Store, prefix string) (completed, failed, absent, held string) {
	t.Helper()
	completed, failed, absent, held = prefix+"-completed", prefix+"-failed", prefix+"-absent", prefix+"-held"
	now := time.Now()
	c, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: mustKey(t, "onceq", completed), Owner: "w", Now: now, LeaseUntil: now.Add(time.Hour)})
	if err == nil {
		err = st.Complete(t.Context(), dedup.CompleteRequest{Lease: c.Lease, Now: now, ExpiresAt: now.Add(time.Hour)})
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err = st.Claim(t.Context(), dedup.ClaimRequest{Key: mustKey(t, "onceq", failed), Owner: "w", Now: now, LeaseUntil: now.Add(time.Hour)})
	if err == nil {
		err = st.Fail(t.Context(), dedup.FailRequest{Lease: c.Lease, Reason: "poison", Now: now, RetryAt: now.Add(time.Hour), DeadLetter: true})
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: mustKey(t, "onceq", held), Owner: "w", Now: now, LeaseUntil: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return completed, failed, absent, held
}

// queueDepth is how many messages the queue holds, visible or not.
func queueDepth(t *testing.T, q *awssqs.Client, url string) int {
	t.Helper()
	out, err := q.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	var a, b int
	fmt.Sscan(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)], &a)
	fmt.Sscan(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)], &b)
	return a + b
}

// drain receives every message of the queue and deletes it, returning
// each one's idempotency key, until want have come.
func drain(t *testing.T, q *awssqs.Client, url string, want int) []sqstypes.Message {
	t.Helper()
	var got []sqstypes.Message
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d messages in the source queue", want), func() bool {
		out, err := q.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			got = append(got, m)
			_, _ = q.DeleteMessage(t.Context(), &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
		}
		return len(got) >= want
	})
	return got
}

// onceq redrive -sqs-dlq on every store: a dry run moves nothing; a run
// moves the failed letter (its record reset) and the one with no record,
// leaves the completed one and the held one in the dead-letter queue, and
// says so; a second run moves nothing more. The log names each letter by
// key_hash, never by key.
func TestRedriveSQS(t *testing.T) {
	q := localSQS(t)
	for name, open := range redriveStores(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			qn := "onceq-redrive-" + tableName(t)[len("onceq_cli_"):]
			src, _ := createQueue(t, q, qn, nil)
			dlq, _ := createQueue(t, q, qn+"-dlq", nil)
			t.Cleanup(func() {
				for _, u := range []string{src, dlq} {
					_, _ = q.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)})
				}
			})
			completed, failed, absent, held := redriveRecords(t, s.st, "secret-"+qn)
			for _, k := range []string{completed, failed, absent, held} {
				_, err := q.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: aws.String("body of " + k),
					MessageAttributes: map[string]sqstypes.MessageAttributeValue{
						broker.IdempotencyKeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(k)},
						sqssource.ReasonAttribute:      {DataType: aws.String("String"), StringValue: aws.String("handler: poison " + k[len(k)-4:])},
						"trace":                        {DataType: aws.String("String"), StringValue: aws.String("t-1")},
					}})
				if err != nil {
					t.Fatal(err)
				}
			}
			failedKey := mustKey(t, "onceq", failed)
			before, err := s.st.Get(t.Context(), failedKey)
			if err != nil {
				t.Fatal(err)
			}
			args := append(append([]string{"redrive"}, s.args...), "-sqs-dlq", dlq, "-sqs-source", src)

			code, out, errOut := onceq(append(args, "-dry-run")...)
			if code != 0 || !strings.Contains(out, "4 looked at: would move 2, 1 completed (not re-run), 1 held by a worker") {
				t.Fatalf("dry run: exit %d, %s\n%s", code, out, errOut)
			}
			if n := queueDepth(t, q, src); n != 0 {
				t.Fatalf("the dry run left %d messages in the source queue", n)
			}
			if r, _ := s.st.Get(t.Context(), failedKey); r.Version != before.Version || r.Status != dedup.StatusDeadLetter {
				t.Fatalf("the dry run changed the failed record: %+v", r)
			}

			code, out, errOut = onceq(args...)
			if code != 0 || !strings.Contains(out, "4 looked at: moved 2, 1 completed (not re-run), 1 held by a worker, 0 passed over") {
				t.Fatalf("redrive: exit %d, %s\n%s", code, out, errOut)
			}
			for _, k := range []string{completed, failed, absent, held} {
				if strings.Contains(errOut, k) {
					t.Fatalf("the log holds the key %q:\n%s", k, errOut)
				}
				if !strings.Contains(errOut, "key_hash="+dedup.KeyHash(mustKey(t, "onceq", k))) {
					t.Fatalf("the log does not name key_hash %s:\n%s", dedup.KeyHash(mustKey(t, "onceq", k)), errOut)
				}
			}
			if !strings.Contains(errOut, "from=\"SQS queue "+qn+"-dlq\" to=\"SQS queue "+qn+"\"") || !strings.Contains(errOut, "reason=\"handler: poison iled\"") {
				t.Fatalf("the log does not say from, to and why:\n%s", errOut)
			}
			got := drain(t, q, src, 2)
			keys := map[string]bool{}
			for _, m := range got {
				keys[aws.ToString(m.MessageAttributes[broker.IdempotencyKeyAttribute].StringValue)] = true
				if _, ok := m.MessageAttributes[sqssource.ReasonAttribute]; ok || aws.ToString(m.MessageAttributes["trace"].StringValue) != "t-1" {
					t.Fatalf("moved message's attributes %v: want its own, without the dead-letter reason", m.MessageAttributes)
				}
			}
			if len(got) != 2 || !keys[failed] || !keys[absent] {
				t.Fatalf("source queue got %v, want the failed and the absent letters once each", keys)
			}
			r, err := s.st.Get(t.Context(), failedKey)
			if err != nil || r.Status != dedup.StatusFailed || r.Version != before.Version+1 || r.Attempts != 0 || !strings.Contains(r.LastError, "redriven from SQS queue") {
				t.Fatalf("failed record after the redrive %+v (%v), want it reset", r, err)
			}
			if n := queueDepth(t, q, dlq); n != 2 {
				t.Fatalf("the dead-letter queue holds %d, want the completed and the held letters", n)
			}

			code, out, errOut = onceq(args...)
			if code != 0 || !strings.Contains(out, "2 looked at: moved 0, 1 completed (not re-run), 1 held by a worker") {
				t.Fatalf("second redrive: exit %d, %s\n%s", code, out, errOut)
			}
		})
	}
}

// Two redrives of one dead-letter queue at once move each letter once.
func TestRedriveSQSTwoAtOnce(t *testing.T) {
	q := localSQS(t)
	s := redriveStores(t)["redis"](t)
	qn := "onceq-redrive-" + tableName(t)[len("onceq_cli_"):]
	src, _ := createQueue(t, q, qn, nil)
	dlq, _ := createQueue(t, q, qn+"-dlq", nil)
	t.Cleanup(func() {
		for _, u := range []string{src, dlq} {
			_, _ = q.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		}
	})
	const n = 30
	for i := range n {
		_, err := q.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: aws.String(fmt.Sprintf("m-%d", i))})
		if err != nil {
			t.Fatal(err)
		}
	}
	args := append(append([]string{"redrive"}, s.args...), "-sqs-dlq", dlq, "-sqs-source", src)
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
	got := drain(t, q, src, n)
	bodies := map[string]int{}
	for _, m := range got {
		bodies[aws.ToString(m.Body)]++
	}
	if moved != n || len(got) != n || len(bodies) != n {
		t.Fatalf("two redrives moved %d (summaries %q); the source queue got %d messages, %d distinct; want %d once each", moved, outs, len(got), len(bodies), n)
	}
}

// onceq redrive -kafka-dlt: a letter goes back to its original topic with
// its key, value and headers, less the dead-letter ones, unless its record
// is COMPLETED; the group's committed offsets make a second run look at
// nothing.
func TestRedriveKafka(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	s := redriveStores(t)["postgres"](t)
	name := tableName(t)
	orig, dlt := name+"-orders", name+"-orders-dlt"
	cl := redriveKafka(t, brokers)
	// Two letters; the key of the first completed.
	letters := []*kgo.Record{
		{Topic: dlt, Key: []byte("order-1"), Value: []byte(`{"n":1}`)},
		{Topic: dlt, Key: []byte("order-2"), Value: []byte(`{"n":2}`)},
	}
	for _, r := range letters {
		r.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte("t-1")}, {Key: kafkagroup.ReasonHeader, Value: []byte("poison")},
			{Key: kafkagroup.OriginalTopicHeader, Value: []byte(orig)}, {Key: kafkagroup.OriginalPartitionHeader, Value: []byte("0")},
			{Key: kafkagroup.OriginalOffsetHeader, Value: []byte("7")}}
	}
	// The original topic exists, as it would: its first record is there.
	if err := cl.ProduceSync(t.Context(), append([]*kgo.Record{{Topic: orig, Key: []byte("order-0")}}, letters...)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	key, err := redrive.RecordKeys("onceq")(&broker.Message{OrderingKey: "order-1", Body: []byte(`{"n":1}`), Origin: broker.Origin{Destination: orig}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := s.st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: key, Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"redrive"}, s.args...), "-kafka-dlt", dlt, "-kafka-brokers", brokers)
	code, out, errOut := onceq(args...)
	if code != 0 || !strings.Contains(out, "2 looked at: moved 1, 1 completed (not re-run)") || !strings.Contains(errOut, "key_hash="+dedup.KeyHash(key)) {
		t.Fatalf("redrive: exit %d, %s\n%s", code, out, errOut)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(orig), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < 2 && ctx.Err() == nil {
		fs := rd.PollFetches(ctx)
		for _, r := range fs.Records() {
			if string(r.Key) != "order-0" {
				recs = append(recs, r)
			}
		}
		if len(recs) > 0 {
			break
		}
	}
	if len(recs) != 1 || string(recs[0].Key) != "order-2" || string(recs[0].Value) != `{"n":2}` || len(recs[0].Headers) != 1 || recs[0].Headers[0].Key != "trace" {
		t.Fatalf("original topic holds %+v beside its first record, want order-2 with its own header only", recs)
	}
	code, out, errOut = onceq(args...)
	if code != 0 || !strings.Contains(out, "0 looked at") {
		t.Fatalf("second redrive: exit %d, %s\n%s", code, out, errOut)
	}
}

// onceq redrive -outbox on each store with an outbox: two runs at once
// put a DEAD entry back to PENDING once, with its ID; a third finds none.
func TestRedriveOutbox(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) ([]string, dedup.Store){
		"postgres": func(t *testing.T) ([]string, dedup.Store) {
			url := testenv.PostgresURL(t)
			conn, table := pgTable(t, url)
			t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgstore.OutboxTable(table)) })
			st, err := pgstore.New(conn, pgstore.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			return []string{"-store", "postgres", "-postgres-url", url, "-table", table}, st
		},
		"dynamodb": func(t *testing.T) ([]string, dedup.Store) {
			table, st := dynamoWithOutbox(t)
			return []string{"-table", table}, st
		},
	} {
		t.Run(name, func(t *testing.T) {
			args, st := open(t)
			ob, err := outboxOf(st.Capabilities(), name)
			if err != nil {
				t.Fatal(err)
			}
			claimComplete(st)(t, "onceq#o-1", []outbox.Message{{Destination: "orders-missing", Body: []byte("x")}})
			now := time.Now()
			var es []outbox.Entry
			testenv.Eventually(t, 30*time.Second, "the entry to lease", func() bool {
				es, err = ob.Lease(t.Context(), outbox.LeaseRequest{Owner: "r", Now: time.Now(), LeaseUntil: now.Add(time.Minute), Max: 10})
				return err == nil && len(es) == 1
			})
			if err := ob.Dead(t.Context(), es[0].Lease, "no such queue", now, now.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			args = append(append([]string{"redrive"}, args...), "-outbox")
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
			if !strings.Contains(outs[0]+outs[1], "moved 1") || strings.Count(outs[0]+outs[1], "moved 1") != 1 {
				t.Fatalf("two redrives at once: %q, want the entry moved by one", outs)
			}
			pending, err := ob.Entries(t.Context(), outbox.Pending, 10)
			if err != nil || len(pending) != 1 || pending[0].ID != outbox.ID("onceq#o-1", 0) || pending[0].Lease.Version != es[0].Lease.Version+1 {
				t.Fatalf("pending entries %+v (%v), want the entry once, one version on", pending, err)
			}
			if code, out, errOut := onceq(args...); code != 0 || !strings.Contains(out, "0 looked at") {
				t.Fatalf("third redrive: exit %d, %s\n%s", code, out, errOut)
			}
		})
	}
}
