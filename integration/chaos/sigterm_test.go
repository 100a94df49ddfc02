package main

import (
	"encoding/json"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// workerSummary is the order-worker's JSON line.
type workerSummary struct {
	Processed    int64 `json:"processed"`
	Duplicates   int64 `json:"duplicates"`
	Rejected     int64 `json:"rejected"`
	DeadLettered int64 `json:"dead_lettered"`
	LeaseLost    int64 `json:"lease_lost"`
}

// The order-worker process gets SIGTERM under load: the work in flight
// finishes (nothing left PENDING), no delivery was deleted without its
// order COMPLETED, the summary line is printed and the exit is clean; a
// restart finishes the queue, and across both runs every order was
// processed exactly once.
func TestWorkerSIGTERM(t *testing.T) {
	dbEP, sqsEP := testenv.DynamoDBEndpoint(t), testenv.SQSEndpoint(t)
	t.Setenv("ONCEQ_DYNAMODB_ENDPOINT", dbEP)
	t.Setenv("ONCEQ_SQS_ENDPOINT", sqsEP)
	cfg, err := parseFlags([]string{"-workers", "1", "-orders", "3000", "-malformed", "4", "-seed", "11"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(testenv.Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(testenv.AccessKeyID, testenv.SecretAccessKey, "")))
	if err != nil {
		t.Fatal(err)
	}
	db := ddb.NewFromConfig(awsCfg, func(o *ddb.Options) { o.BaseEndpoint = aws.String(dbEP) })
	n, err := setUp(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newSQS(ctx, awsCfg, cfg, n.suffix)
	if err != nil {
		t.Fatal(err)
	}
	q := b.q
	// Slow commits, so that many orders are mid-transaction at SIGTERM.
	proxy := faultproxy.Start(t, dbEP, faultproxy.WithSeed(3))
	proxy.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Rate: 0.5, Fault: faultproxy.Latency, Delay: 150 * time.Millisecond})
	ds, want := plan(cfg, mrand.New(mrand.NewPCG(11, 12)))
	if err := b.send(ctx, ds); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "order-worker")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/onceq/onceq/examples/order-worker").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	p := &pool{bin: bin, tmp: tmp, cfg: cfg, names: n, storeArgs: []string{"-store", "dynamodb"}, brokerArgs: b.workerArgs(), dynamoURL: proxy.URL(), logw: os.Stderr}
	t.Cleanup(func() { p.stopAll(5 * time.Second) })

	if err := p.start(0); err != nil {
		t.Fatal(err)
	}
	for rows, deadline := 0, time.Now().Add(2*time.Minute); rows < len(want.orders)/4; {
		if err := p.check(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a quarter of the orders not written in time: %d rows", rows)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition under a deadline
		rows = countRows(t, db, n.orders)
	}
	first := stopOne(t, p)
	if first.Processed == 0 || first.Processed >= int64(len(want.orders)) {
		t.Fatalf("first run processed %d of %d: not stopped under load", first.Processed, len(want.orders))
	}
	if pending := countStatus(t, db, n.idem, "PENDING"); pending != 0 {
		t.Fatalf("%d records PENDING after SIGTERM: in-flight work did not finish", pending)
	}

	// Every delivery no longer in the queue was deleted: its order must be
	// COMPLETED, which its orders row (same transaction) shows.
	left := map[string]int{}
	var handles []string
	for empty := 0; empty < 2; {
		out, err := q.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(b.queueURL), MaxNumberOfMessages: 10,
			VisibilityTimeout: 600, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			empty++
			continue
		}
		for _, m := range out.Messages {
			left[aws.ToString(m.Body)]++
			handles = append(handles, aws.ToString(m.ReceiptHandle))
		}
	}
	sent := map[string]int{}
	for _, d := range ds {
		sent[d.body]++
	}
	rows := orderRows(t, db, n.orders)
	for body, k := range sent {
		if want.malformed[body] || k == left[body] {
			continue
		}
		var o struct {
			OrderID string `json:"order_id"`
		}
		_ = json.Unmarshal([]byte(body), &o)
		if !rows[o.OrderID] {
			t.Fatalf("order %s: %d of %d deliveries deleted, but it is not COMPLETED", o.OrderID, k-left[body], k)
		}
	}
	for _, h := range handles { // back in the queue for the restart
		if _, err := q.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(b.queueURL), ReceiptHandle: aws.String(h), VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
	}

	if err := p.start(0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Minute); ; {
		if err := p.check(); err != nil {
			t.Fatal(err)
		}
		if queueEmpty(t, q, b.queueURL) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queue was not drained in time")
		}
		time.Sleep(200 * time.Millisecond) // polling a condition under a deadline
	}
	second := stopOne(t, p)
	t.Logf("first run %+v, after the restart %+v", first, second)
	if got := first.Processed + second.Processed; got != int64(len(want.orders)) {
		t.Fatalf("processed %d + %d, want %d exactly once", first.Processed, second.Processed, len(want.orders))
	}
	if dl := first.DeadLettered + second.DeadLettered; dl != int64(len(want.malformed)) {
		t.Fatalf("dead-lettered %d, want %d", dl, len(want.malformed))
	}
	res := &result{messages: len(ds), malformed: len(want.malformed)}
	if err := verify(ctx, dynamoTables{db, n}, b, want, res); err != nil {
		t.Fatal(err)
	}
	if res.lost != 0 || res.doubled != 0 || res.extra != 0 || res.pending != 0 || res.unitsGot != res.unitsWant || res.dlqMissing != 0 {
		t.Fatalf("after the restart: %+v", res)
	}
}

// stopOne sends SIGTERM to the pool's worker and returns its summary.
func stopOne(t *testing.T, p *pool) workerSummary {
	t.Helper()
	sums, failed := p.stopAll(30 * time.Second)
	if failed != 0 || len(sums) != 1 {
		t.Fatalf("SIGTERM: %d failed, %d summaries", failed, len(sums))
	}
	lines := strings.Split(strings.TrimSpace(sums[0]), "\n")
	var s workerSummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("summary line %q: %v", sums[0], err)
	}
	return s
}

func countRows(t *testing.T, db *ddb.Client, table string) int {
	t.Helper()
	out, err := db.Scan(t.Context(), &ddb.ScanInput{TableName: aws.String(table), Select: ddbtypes.SelectCount})
	if err != nil {
		t.Fatal(err)
	}
	return int(out.Count) // one page: well under 1 MB of keys here
}

func orderRows(t *testing.T, db *ddb.Client, table string) map[string]bool {
	t.Helper()
	rows := map[string]bool{}
	if err := scan(t.Context(), db, table, func(it map[string]ddbtypes.AttributeValue) {
		if s, ok := it["order_id"].(*ddbtypes.AttributeValueMemberS); ok {
			rows[s.Value] = true
		}
	}); err != nil {
		t.Fatal(err)
	}
	return rows
}

func countStatus(t *testing.T, db *ddb.Client, table, status string) int {
	t.Helper()
	n := 0
	if err := scan(t.Context(), db, table, func(it map[string]ddbtypes.AttributeValue) {
		if s, ok := it["status"].(*ddbtypes.AttributeValueMemberS); ok && s.Value == status {
			n++
		}
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func queueEmpty(t *testing.T, q *awssqs.Client, url string) bool {
	t.Helper()
	out, err := q.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible, sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range out.Attributes {
		if v != "0" {
			return false
		}
	}
	return true
}
