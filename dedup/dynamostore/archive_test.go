package dynamostore_test

import (
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// The archive's cost: one GetItem per new key, none for a duplicate of a
// live record.
func TestArchiveCostPerNewKey(t *testing.T) {
	c := &calls{}
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), c)
	table, archive := recordsTable(t, client), recordsTable(t, client)
	st := newStore(t, client, table, dynamostore.WithArchive(archive), dynamostore.WithoutClockCheck())
	now := time.Now()
	k := uniqueKey(t)
	c.reset()
	cl := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
	if !cl.Acquired || c.get("PutItem") != 1 || c.get("GetItem") != 1 || c.total() != 2 {
		t.Fatalf("new key: acquired %v, calls %v; want PutItem and one GetItem of the archive", cl.Acquired, c.by)
	}
	if err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c.reset()
	if cl := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "b", Now: now, LeaseUntil: now.Add(time.Minute)}); cl.Acquired || c.total() != 1 {
		t.Fatalf("duplicate: acquired %v, calls %v; want one PutItem", cl.Acquired, c.by)
	}
}
