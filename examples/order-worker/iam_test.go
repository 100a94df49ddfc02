package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
)

// readmePolicy is the worker's policy in docs/iam.md: actions by resource
// name (table or queue), the ARN's last part.
func readmePolicy(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/iam.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(\\{.*?)```").FindAllStringSubmatch(string(b), -1)
	for _, m := range blocks {
		if !strings.Contains(m[1], `"Sid": "OrderWorkerBusinessTables"`) {
			continue
		}
		var p struct {
			Statement []struct {
				Action   []string
				Resource json.RawMessage
			}
		}
		if err := json.Unmarshal([]byte(m[1]), &p); err != nil {
			t.Fatalf("docs/iam.md's worker policy is not JSON: %v", err)
		}
		out := map[string][]string{}
		for _, s := range p.Statement {
			var rs []string
			if err := json.Unmarshal(s.Resource, &rs); err != nil {
				var r string
				_ = json.Unmarshal(s.Resource, &r)
				rs = []string{r}
			}
			for _, r := range rs {
				name := r[max(strings.LastIndexByte(r, '/'), strings.LastIndexByte(r, ':'))+1:]
				out[name] = append(out[name], s.Action...)
			}
		}
		for k, v := range out {
			slices.Sort(v)
			out[k] = slices.Compact(v)
		}
		return out
	}
	t.Fatal("no worker policy (Sid OrderWorkerBusinessTables) in docs/iam.md")
	return nil
}

// TestIAMPolicyMatchesCalls: the worker on SQS and DynamoDB, through every
// path that calls AWS (a new order, a duplicate, an order beyond the stock,
// a malformed order dead-lettered to the redrive policy's queue), makes
// exactly the calls docs/iam.md's policy allows, per table and queue: no
// action the code needs is missing, and none is granted that it never uses.
func TestIAMPolicyMatchesCalls(t *testing.T) {
	q, db, suffix := localAWS(t)
	ctx := t.Context()
	idem, inv, orders := "idem_"+suffix, "inv_"+suffix, "orders_"+suffix
	if err := dynamostore.CreateTable(ctx, db, idem); err != nil {
		t.Fatal(err)
	}
	if err := createExampleTables(ctx, db, inv, orders, 100, 10); err != nil {
		t.Fatal(err)
	}
	dlq := createQueue(t, q, "orders-dlq-"+suffix, nil)
	attrs, err := q.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(dlq),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	queue := createQueue(t, q, "orders-"+suffix, map[string]string{"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"20"}`,
		attrs.Attributes[string(types.QueueAttributeNameQueueArn)])})
	bodies := []string{`{"order_id":"o-1","sku":"sku-1","qty":1}`, `{"order_id":"o-1","sku":"sku-1","qty":1}`,
		`{"order_id":"o-2","sku":"sku-2","qty":1000}`, `not json`}
	for _, b := range bodies {
		if _, err := q.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	rec := awstest.NewIAMRecorder()
	opts, err := parseFlags([]string{"-source", "sqs", "-store", "dynamodb", "-sqs-queue-url", queue,
		"-idempotency-table", idem, "-inventory-table", inv, "-orders-table", orders,
		"-progress", "1h", "-metrics-addr", "127.0.0.1:0", "-concurrency", "1"}, new(strings.Builder))
	if err != nil {
		t.Fatal(err)
	}
	opts.awsAPIOptions = []func(*middleware.Stack) error{rec.APIOption}
	runWorker(t, opts, len(bodies))

	readme := map[string]string{idem: "onceq_idempotency", inv: "onceq_inventory", orders: "onceq_orders",
		"orders-" + suffix: "orders", "orders-dlq-" + suffix: "orders-dlq"}
	got := map[string][]string{}
	for res, as := range rec.Actions() {
		name, ok := readme[res]
		if !ok {
			t.Errorf("calls on %s, which docs/iam.md's policy does not name: %v", res, as)
			continue
		}
		got[name] = as
	}
	// Sent on paths this run does not take (a long handler's heartbeat,
	// a retry given back): sqssource's own tests exercise them.
	got["orders"] = append(got["orders"], "sqs:ChangeMessageVisibility")
	slices.Sort(got["orders"])
	got["orders"] = slices.Compact(got["orders"])
	want := readmePolicy(t)
	for name := range readme {
		if r := readme[name]; !slices.Equal(got[r], want[r]) {
			t.Errorf("%s: the code calls %v; docs/iam.md's policy grants %v", r, got[r], want[r])
		}
	}
}
