package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/payload"
	"github.com/onceq/onceq/retry"
)

// With TenantLayout the tenant comes from each message (here a JSON
// field): records of different tenants sit on different partition keys,
// the same id under two tenants is two records, and a per-tenant listing
// (a Query) returns that tenant's records only. With TenantShards a
// tenant's records spread over several partition keys and the listing
// still finds them all.
func TestTenantLayoutFromMessage(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			table := recordsTable(t, client, dynamostore.TenantLayout())
			st := newStore(t, client, table, dynamostore.TenantLayout(), dynamostore.TenantShards(shards))
			var runs atomic.Int32
			h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
				runs.Add(1)
				return consumer.Result{}, nil
			})
			if _, err := consumer.NewGuard(st, h); !errors.Is(err, consumer.ErrInvalidConfig) {
				t.Fatalf("a guard without a tenant function: %v, want ErrInvalidConfig", err)
			}
			g, err := consumer.NewGuard(st, h, consumer.WithKeyFunc(payload.JSONKey("id")), consumer.WithTenantFunc(payload.JSONKey("tenant")))
			if err != nil {
				t.Fatal(err)
			}
			send := func(tenant, id string) consumer.Outcome {
				return g.Process(t.Context(), &consumer.Message{Body: fmt.Appendf(nil, `{"tenant":%q,"id":%q}`, tenant, id)})
			}
			acme, other := "acme", "glob#ex%" // '#' and '%' must not confuse the layout
			for _, m := range [][2]string{{acme, "1"}, {acme, "2"}, {acme, "3"}, {other, "1"}, {other, "2"}} {
				if o := send(m[0], m[1]); o.Kind != consumer.Processed {
					t.Fatalf("%v: %v %v", m, o.Kind, o.Err)
				}
			}
			if o := send(acme, "1"); o.Kind != consumer.Duplicate {
				t.Fatalf("acme/1 again: %v", o.Kind)
			}
			if o := g.Process(t.Context(), &consumer.Message{Body: []byte(`{"id":"9"}`)}); o.Kind != consumer.DeadLettered {
				t.Fatalf("a message without a tenant: %v, want dead-lettered", o.Kind)
			}
			if n := runs.Load(); n != 5 {
				t.Fatalf("%d handler runs, want 5", n)
			}
			since := time.Now().Add(-time.Hour)
			shardsSeen := map[string]bool{}
			list := func(tenant string) map[string]bool {
				recs, err := st.TenantRecords(t.Context(), tenant, since, 100)
				if err != nil {
					t.Fatal(err)
				}
				pks := map[string]bool{}
				for _, r := range recs {
					pk := strings.SplitN(r.Key, "#", 2)[0]
					pks[pk] = true
					// The record's key is the consumer's; its item's
					// partition key carries the shard.
					item, err := st.ItemKey(r.Key)
					if err != nil {
						t.Fatal(err)
					}
					if shards > 1 {
						shardsSeen[item["pk"].(*types.AttributeValueMemberS).Value] = true
					}
				}
				if len(recs) != map[string]int{acme: 3, other: 2}[tenant] {
					t.Errorf("tenant %q: %d records, want %d", tenant, len(recs), map[string]int{acme: 3, other: 2}[tenant])
				}
				return pks
			}
			a, o := list(acme), list(other)
			if len(a) != 1 || !a["acme"] || len(o) != 1 || !o["glob%23ex%25"] {
				t.Errorf("partition keys: acme %v, other %v; want only acme and glob%%23ex%%25", a, o)
			}
			// A log line's key hash finds a record, sharded or not.
			key, _ := dedup.TenantKey(acme, "onceq#2")
			if res, err := st.FindKeyHash(t.Context(), dedup.KeyHash(key), 100); err != nil || len(res.Records) != 1 {
				t.Errorf("FindKeyHash of acme/2: %+v %v, want its record", res, err)
			}
			if shards > 1 && len(shardsSeen) < 3 {
				t.Errorf("sharded partition keys %v: want the 5 records spread over at least 3", shardsSeen)
			}
			if recs, err := st.TenantRecords(t.Context(), acme, time.Now().Add(time.Hour), 100); err != nil || len(recs) != 0 {
				t.Errorf("records since an hour ahead: %d %v, want none", len(recs), err)
			}
		})
	}
}

// Through a proxy that throttles each partition key beyond 10 requests/s,
// the same 100 claims at the same rate: the namespace layout puts them all
// on one partition key and is throttled; the tenant layout spreads them
// over 20 tenants' keys (5 each) and is not.
func TestTenantLayoutNotThrottledWhereNamespaceLayoutIs(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	direct := dynamoClient(t, ep, nil)
	const claims, tenants = 100, 20
	run := func(layout dynamostore.Option, key func(i int) string) int {
		table := recordsTable(t, direct, layout)
		p := faultproxy.Start(t, ep)
		p.SetPartitionCapacity("pk", 10)
		// One attempt: a throttle is an error here, not hidden by a retry.
		st := newStore(t, dynamoClient(t, p.URL(), nil), table, layout, dynamostore.WithRetryPolicy(fastPolicy(1)), dynamostore.WithLogger(testenv.Logger(t)))
		at := time.Now()
		var throttled atomic.Int32
		concurrently(t, 10, func(w int) error {
			for i := w; i < claims; i += 10 {
				_, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: key(i), PayloadHash: "h", Owner: "o", Now: at, LeaseUntil: at.Add(time.Minute)})
				if retry.Classify(err) == retry.Throttled {
					throttled.Add(1)
				} else if err != nil {
					return err
				}
			}
			return nil
		})
		if n := p.Stats().OverPartitionCapacity; n != int(throttled.Load()) {
			t.Errorf("proxy throttled %d, store saw %d", n, throttled.Load())
		}
		return int(throttled.Load())
	}
	static := run(dynamostore.NamespaceLayout(), func(i int) string { return fmt.Sprintf("orders#m%d", i) })
	tenant := run(dynamostore.TenantLayout(), func(i int) string {
		k, _ := dedup.TenantKey(fmt.Sprintf("t%d", i%tenants), fmt.Sprintf("orders#m%d", i))
		return k
	})
	t.Logf("throttled claims of %d: namespace layout %d, tenant layout %d", claims, static, tenant)
	if static < claims/2 || tenant != 0 {
		t.Fatalf("throttled: namespace layout %d of %d (want at least half), tenant layout %d (want 0)", static, claims, tenant)
	}
}
