package dynamostore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// twoRegions are clients of two DynamoDB Local instances standing in for
// two regions of a Global Table (they do not replicate).
func twoRegions(t *testing.T) (east, west *ddb.Client) {
	t.Helper()
	east = dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	west = dynamoClient(t, testenv.DynamoDB2Endpoint(t), nil)
	return east, west
}

// Check probes every regional client: a table present in both regions
// passes; one missing from the second region fails Check, naming that
// client, where only the first used to be checked.
func TestCheckProbesEveryRegion(t *testing.T) {
	east, west := twoRegions(t)
	table := recordsTable(t, east)
	st := newStore(t, nil, table, dynamostore.WithRegionalClients([]*ddb.Client{east, west}))
	err := st.Check(t.Context())
	if err == nil || !strings.Contains(err.Error(), "regional client 1") || !strings.Contains(err.Error(), table) {
		t.Fatalf("Check with the table missing from the second region: %v, want an error naming regional client 1 and the table", err)
	}
	if err := dynamostore.CreateTable(t.Context(), west, table); err != nil {
		t.Fatal(err)
	}
	if err := st.Check(t.Context()); err != nil {
		t.Fatalf("Check with the table in both regions: %v", err)
	}
}

// The region-list change docs/operations.md prescribes, a drain, keeps one owner
// per key. Run at once, an old list [east] and a new one [east, west]
// both win a claim of a key the new list homes in west: the hazard. By the
// drain (the old list's workers stop; replication, copied here by hand as
// Global Tables would, brings every record to every region; then the new
// list starts) the new home already holds each key's record: a key the old
// list completed is a duplicate under the new one.
func TestRegionListChangeByDrainKeepsOneOwner(t *testing.T) {
	east, west := twoRegions(t)
	table := recordsTable(t, east)
	if err := dynamostore.CreateTable(t.Context(), west, table); err != nil {
		t.Fatal(err)
	}
	old := newStore(t, nil, table, dynamostore.WithRegionalClients([]*ddb.Client{east}), dynamostore.WithoutClockCheck())
	next := newStore(t, nil, table, dynamostore.WithRegionalClients([]*ddb.Client{east, west}), dynamostore.WithoutClockCheck())
	var keys []string // keys the new list homes in west
	for len(keys) < 4 {
		if k := uniqueKey(t); next.HomeRegion(k) == 1 {
			keys = append(keys, k)
		}
	}
	now := time.Now()
	claim := func(st *dynamostore.Store, key, owner string) dedup.Claim {
		return mustClaim(t, st, dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: owner, Now: now, LeaseUntil: now.Add(time.Minute)})
	}

	if a, b := claim(old, keys[0], "old"), claim(next, keys[0], "new"); !a.Acquired || !b.Acquired {
		t.Fatalf("both lists at once: old acquired %v, new %v; want both (the hazard the drain avoids)", a.Acquired, b.Acquired)
	}

	for _, k := range keys[1:] {
		c := claim(old, k, "old")
		if err := old.Complete(t.Context(), dedup.CompleteRequest{Lease: c.Lease, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	replicate(t, east, west, table)
	for _, k := range keys[1:] {
		if c := claim(next, k, "new"); c.Acquired || c.Existing.Status != dedup.StatusCompleted || c.Existing.Owner != "old" {
			t.Fatalf("after the drain, the new list's claim: %+v; want the old list's COMPLETED record", c)
		}
	}
}

// replicate copies every item of table from one region to the other, as
// Global Tables' replication does.
func replicate(t *testing.T, from, to *ddb.Client, table string) {
	t.Helper()
	p := ddb.NewScanPaginator(from, &ddb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			if _, err := to.PutItem(t.Context(), &ddb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
				t.Fatal(err)
			}
		}
	}
}
