package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
)

// A table in the tenant layout keeps only tenants' records (a consumer
// without a tenant function refuses such a store), so a run told
// -tenant-layout but not where each letter's tenant is could find no
// record: every letter would be moved unchecked, a DEAD_LETTER record
// left un-reset and a COMPLETED one unseen. It is refused as bad flags,
// and the letters and records stay as they were.
func TestReviewRedriveTenantLayoutWithoutTenantRefused(t *testing.T) {
	q := localSQS(t)
	table, st := shardedTable(t, 1)
	qn, src, dlq := sqsPair(t, q)
	failed, done := tenantMessage("acme", "order-failed-"+qn), tenantMessage("acme", "order-done-"+qn)
	before := processed(t, st, true, failed)
	processed(t, st, false, done)
	sendLetters(t, q, dlq, failed, done)

	code, out, errOut := onceq("redrive", "-table", table, "-tenant-layout", "-sqs-dlq", dlq, "-sqs-source", src)
	if code != 2 || !strings.Contains(errOut, "-tenant-attribute") {
		t.Fatalf("redrive -tenant-layout without a tenant: exit %d, %s\n%s\nwant exit 2 asking where the tenant is", code, out, errOut)
	}
	if n := queueDepth(t, q, src); n != 0 {
		t.Fatalf("the refused run moved %d letters to the source queue", n)
	}
	if n := queueDepth(t, q, dlq); n != 2 {
		t.Fatalf("the dead-letter queue holds %d letters, want both", n)
	}
	r, err := st.Get(t.Context(), tenantKey(t, "acme", "order-failed-"+qn))
	if err != nil || r.Version != before.Version || r.Status != before.Status {
		t.Fatalf("the failed record after the refused run: %+v, %v; want it as it was (%v, version %d)", r, err, before.Status, before.Version)
	}
	if r, err := st.Get(t.Context(), tenantKey(t, "acme", "order-done-"+qn)); err != nil || r.Status != dedup.StatusCompleted {
		t.Fatalf("the completed record: %+v, %v", r, err)
	}
}

// visibleDepth is how many letters of url are in sight now, and how many
// out of it.
func visibleDepth(t *testing.T, q *awssqs.Client, url string) (visible, hidden int) {
	t.Helper()
	out, err := q.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	visible, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	hidden, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return visible, hidden
}

// A dry run of a standard dead-letter queue of more letters than one
// receive returns, with a -hold of an hour, a tenant read per letter and
// one letter naming none, whether it ends at the last letter or at -max:
// right after it every letter is in sight (none hidden for the hold),
// none sent or deleted; the real run that follows looks at them all.
func TestReviewRedriveSQSDryRunHidesNothingForHold(t *testing.T) {
	q := localSQS(t)
	s := redriveStores(t)["redis"](t)
	qn, src, dlq := sqsPair(t, q)
	const n = 23
	done := tenantMessage("acme", "order-done-"+qn)
	processed(t, s.st, false, done)
	ms := []*consumer.Message{done, tenantMessage("", "order-none-"+qn)}
	for i := range n - 2 {
		ms = append(ms, tenantMessage("acme", fmt.Sprintf("order-%02d-%s", i, qn)))
	}
	sendLetters(t, q, dlq, ms...)
	args := append(append([]string{"redrive"}, s.args...), "-sqs-dlq", dlq, "-sqs-source", src, "-tenant-attribute", "tenant", "-hold", "1h")
	for _, extra := range [][]string{{"-dry-run"}, {"-dry-run", "-max", "3"}} {
		code, out, errOut := onceq(append(args, extra...)...)
		if code != 0 || !strings.Contains(out, "would move") {
			t.Fatalf("redrive %v: exit %d, %s\n%s", extra, code, out, errOut)
		}
		if v, h := visibleDepth(t, q, dlq); v != n || h != 0 {
			t.Fatalf("after redrive %v the dead-letter queue has %d letters in sight and %d hidden, want all %d in sight", extra, v, h, n)
		}
		if d := queueDepth(t, q, src); d != 0 {
			t.Fatalf("redrive %v sent %d letters to the source queue", extra, d)
		}
	}
	// The real run holds what it receives for a second only: a receive
	// whose response is lost on the way (the SDK then retries it) hides
	// its letters for the whole hold, as on SQS itself, and the letters
	// hidden by this run's own receives must come back within it.
	args[len(args)-1] = "1s"
	code, out, errOut := onceq(args...)
	if want := fmt.Sprintf("%d looked at: moved %d, 1 completed (not re-run)", n, n-2); code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "1 naming no tenant (left)") {
		v, h := visibleDepth(t, q, dlq)
		t.Fatalf("the run after the dry runs: exit %d, %s\n%s\nwant %q (the dead-letter queue now has %d letters in sight, %d hidden)", code, out, errOut, want, v, h)
	}
}
