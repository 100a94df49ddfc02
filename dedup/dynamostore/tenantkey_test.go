package dynamostore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// What an upgrade finds in a tenant layout table: a record stored under a
// tenant's key of earlier releases ("<tenant>#<namespace>#<key>", sort key
// "<namespace>#<key>") is another item than the new key's (sort key
// "!#<namespace>#<key>"), so the same message is claimed anew; the
// tenant's listing still shows the old record beside the new one, until
// it expires.
func TestTenantKeyUpgradeTenantLayout(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			table := recordsTable(t, client, dynamostore.TenantLayout())
			st := newStore(t, client, table, dynamostore.TenantLayout(), dynamostore.TenantShards(shards))
			now := time.Now()
			claim := func(key string) dedup.Claim {
				cl, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
				if err != nil {
					t.Fatal(err)
				}
				return cl
			}
			old := claim("acme#orders#o-1") // as TenantKey("acme", "orders#o-1") was
			if err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: old.Lease, Response: []byte("old"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			key, err := dedup.TenantKey("acme", "orders#o-1")
			if err != nil {
				t.Fatal(err)
			}
			if cl := claim(key); !cl.Acquired {
				t.Fatalf("the new key of a message stored before the upgrade: %+v, want a new claim", cl)
			}
			recs, err := st.TenantRecords(t.Context(), "acme", now.Add(-time.Hour), 10)
			if err != nil || len(recs) != 2 {
				t.Fatalf("tenant listing: %d records %v, want the old and the new", len(recs), err)
			}
		})
	}
}
