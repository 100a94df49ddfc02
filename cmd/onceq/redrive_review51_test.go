package main

import (
	"strings"
	"testing"

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
