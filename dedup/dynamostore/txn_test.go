package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
)

// TestCallCounts proves the round trips the design promises.
func TestCallCounts(t *testing.T) {
	st, _, c := countedStore(t)
	at := clock()
	ctx := t.Context()

	// A new message: claim + complete = 2 calls.
	k := uniqueKey(t)
	c.reset()
	cl := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(30)})
	if !cl.Acquired {
		t.Fatalf("fresh claim lost: %+v", cl.Existing)
	}
	if err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Response: []byte("r"), Now: at(1), ExpiresAt: at(3600)}); err != nil {
		t.Fatal(err)
	}
	if n := c.total(); n != 2 {
		t.Fatalf("claim + complete took %d calls (%v), want 2", n, c.by)
	}

	// A duplicate of a COMPLETED record: 1 call, and it carries the response.
	c.reset()
	dup := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "b", Now: at(2), LeaseUntil: at(32)})
	if dup.Acquired || dup.Existing.Status != dedup.StatusCompleted || string(dup.Existing.Response) != "r" {
		t.Fatalf("duplicate claim: %+v", dup)
	}
	if n := c.total(); n != 1 {
		t.Fatalf("duplicate took %d calls (%v), want 1", n, c.by)
	}

	// One-round-trip mode: 1 call, and 1 for its duplicate.
	cc := st
	k2 := uniqueKey(t)
	c.reset()
	got, err := cc.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k2, PayloadHash: "h", Owner: "a", Response: []byte("r2"), Now: at(0), ExpiresAt: at(3600)})
	if err != nil || !got.Acquired || got.Attempt != 1 || got.Lease.Version != 1 {
		t.Fatalf("ClaimComplete: %+v, %v", got, err)
	}
	if n := c.total(); n != 1 {
		t.Fatalf("ClaimComplete took %d calls (%v), want 1", n, c.by)
	}
	c.reset()
	got, err = cc.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k2, PayloadHash: "h", Owner: "b", Response: []byte("x"), Now: at(1), ExpiresAt: at(3600)})
	if err != nil || got.Acquired || string(got.Existing.Response) != "r2" {
		t.Fatalf("duplicate ClaimComplete: %+v, %v", got, err)
	}
	if n := c.total(); n != 1 {
		t.Fatalf("duplicate ClaimComplete took %d calls, want 1", n)
	}
}

// TestTransactionOutcomes: the claim and the inventory reservation commit together
// or not at all.
func TestTransactionOutcomes(t *testing.T) {
	st, client, c := countedStore(t)
	inv := newInventory(t, client)
	at := clock()
	ctx := t.Context()

	t.Run("CompleteCommitsReservation", func(t *testing.T) {
		sku := uniqueName("sku-")
		inv.stock(t, sku, 10)
		k := uniqueKey(t)
		cl := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(30)})
		c.reset()
		w := inv.reserve(sku, 3)
		err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Response: []byte("ok"), Now: at(1), ExpiresAt: at(3600), Writes: []dedup.Write{&w}})
		if err != nil {
			t.Fatal(err)
		}
		if n := c.get("TransactWriteItems"); n != 1 || c.total() != 1 {
			t.Fatalf("Complete with a write: %v calls, want one TransactWriteItems", c.by)
		}
		if a, r := inv.levels(t, sku); a != 7 || r != 3 {
			t.Fatalf("stock %d/%d, want 7/3", a, r)
		}
		if rec, _ := st.Get(ctx, k); rec.Status != dedup.StatusCompleted || rec.Version != cl.Lease.Version+1 {
			t.Fatalf("record %+v", rec)
		}
	})

	t.Run("CompleteInsufficientStockCancelsBoth", func(t *testing.T) {
		sku := uniqueName("sku-")
		inv.stock(t, sku, 2)
		k := uniqueKey(t)
		cl := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(30)})
		before, _ := st.Get(ctx, k)
		err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Response: []byte("ok"), Now: at(1), ExpiresAt: at(3600),
			Writes: []dedup.Write{inv.note(uniqueName("row-")), inv.reserve(sku, 5)}})
		var be *dedup.BusinessConditionError
		if !errors.As(err, &be) || be.Index != 1 || be.Reason != "ConditionalCheckFailed" {
			t.Fatalf("Complete on short stock: %v, want BusinessConditionError at index 1", err)
		}
		if errors.Is(err, dedup.ErrLeaseLost) {
			t.Fatal("a business rejection reported as a lost lease")
		}
		if a, r := inv.levels(t, sku); a != 2 || r != 0 {
			t.Fatalf("stock %d/%d after a cancelled transaction, want 2/0", a, r)
		}
		after, _ := st.Get(ctx, k)
		if after.Status != dedup.StatusPending || after.Version != before.Version || after.Owner != "a" {
			t.Fatalf("record changed by a cancelled transaction: %+v", after)
		}
		// The lease is still held: the handler's policy can still complete.
		if err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Response: []byte("rejected"), Now: at(2), ExpiresAt: at(3600)}); err != nil {
			t.Fatalf("complete after a business rejection: %v", err)
		}
	})

	t.Run("FencedCompleteAppliesNoWrite", func(t *testing.T) {
		sku := uniqueName("sku-")
		inv.stock(t, sku, 10)
		k := uniqueKey(t)
		a := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(5)})
		b := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "b", Now: at(6), LeaseUntil: at(60)})
		if !b.Acquired {
			t.Fatal("takeover failed")
		}
		err := st.Complete(ctx, dedup.CompleteRequest{Lease: a.Lease, Now: at(7), ExpiresAt: at(3600), Writes: []dedup.Write{inv.reserve(sku, 1)}})
		var lle *dynamostore.LeaseLostError
		if !errors.Is(err, dedup.ErrLeaseLost) || !errors.As(err, &lle) || lle.Current == nil || lle.Current.Owner != "b" {
			t.Fatalf("fenced Complete with a write: %v", err)
		}
		if a, _ := inv.levels(t, sku); a != 10 {
			t.Fatalf("a fenced worker's write applied: available %d", a)
		}
	})

	t.Run("ClaimCompleteCommitsReservation", func(t *testing.T) {
		sku := uniqueName("sku-")
		inv.stock(t, sku, 10)
		k := uniqueKey(t)
		c.reset()
		got, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: "a", Response: []byte("ok"),
			Now: at(0), ExpiresAt: at(3600), Writes: []dedup.Write{inv.reserve(sku, 4)}})
		if err != nil || !got.Acquired {
			t.Fatalf("ClaimComplete: %+v %v", got, err)
		}
		if c.total() != 1 {
			t.Fatalf("ClaimComplete with a write took %v, want 1 call", c.by)
		}
		// A redelivery: nothing applied twice, the cached answer returned.
		got, err = st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: "b", Response: []byte("again"),
			Now: at(1), ExpiresAt: at(3600), Writes: []dedup.Write{inv.reserve(sku, 4)}})
		if err != nil || got.Acquired || got.Existing.Status != dedup.StatusCompleted || string(got.Existing.Response) != "ok" {
			t.Fatalf("duplicate ClaimComplete: %+v %v", got, err)
		}
		if a, r := inv.levels(t, sku); a != 6 || r != 4 {
			t.Fatalf("stock %d/%d, want 6/4 (reserved once)", a, r)
		}
	})

	t.Run("ClaimCompleteInsufficientStockLeavesNoRecord", func(t *testing.T) {
		sku := uniqueName("sku-")
		inv.stock(t, sku, 1)
		k := uniqueKey(t)
		_, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: "a", Response: []byte("ok"),
			Now: at(0), ExpiresAt: at(3600), Writes: []dedup.Write{inv.reserve(sku, 2)}})
		var be *dedup.BusinessConditionError
		if !errors.As(err, &be) || be.Index != 0 {
			t.Fatalf("ClaimComplete on short stock: %v, want BusinessConditionError at index 0", err)
		}
		if _, err := st.Get(ctx, k); !errors.Is(err, dedup.ErrNotFound) {
			t.Fatalf("orphan record after a cancelled ClaimComplete: %v", err)
		}
		if a, r := inv.levels(t, sku); a != 1 || r != 0 {
			t.Fatalf("stock %d/%d, want 1/0", a, r)
		}
	})

	t.Run("TooManyWritesRejectedBeforeSending", func(t *testing.T) {
		k := uniqueKey(t)
		cl := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(30)})
		ws := make([]dedup.Write, 100)
		for i := range ws {
			ws[i] = inv.note(fmt.Sprintf("row-%d", i))
		}
		c.reset()
		err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: at(1), ExpiresAt: at(3600), Writes: ws})
		var tm *dedup.TooManyWritesError
		if !errors.As(err, &tm) || !errors.Is(err, dedup.ErrTooManyWrites) || tm.Got != 100 || tm.Max != 99 {
			t.Fatalf("101 items: %v", err)
		}
		_, err = st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: uniqueKey(t), Owner: "a", Now: at(0), ExpiresAt: at(3600), Writes: ws})
		if !errors.Is(err, dedup.ErrTooManyWrites) {
			t.Fatalf("ClaimComplete with 101 items: %v", err)
		}
		if n := c.total(); n != 0 {
			t.Fatalf("%d calls sent for a rejected transaction, want 0", n)
		}
		// 100 items in all fit.
		if err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: at(1), ExpiresAt: at(3600), Writes: ws[:99]}); err != nil {
			t.Fatalf("100 items: %v", err)
		}
	})

	t.Run("UnsupportedWrites", func(t *testing.T) {
		k := uniqueKey(t)
		cl := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(30)})
		for _, w := range []dedup.Write{foreignWrite("put"), memstore.Write{}} {
			err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: at(1), ExpiresAt: at(3600), Writes: []dedup.Write{w}})
			if !errors.Is(err, dedup.ErrUnsupportedWrite) {
				t.Fatalf("write %T: %v", w, err)
			}
		}
	})

	t.Run("ValidationIsPermanent", func(t *testing.T) {
		k := uniqueKey(t)
		cl := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(30)})
		bad := dynamostore.Write{Update: &types.Update{
			TableName: aws.String(inv.table), Key: map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: "x"}},
			UpdateExpression: aws.String("SET #missing = :v"), // undefined name and value
		}}
		c.reset()
		err := st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: at(1), ExpiresAt: at(3600), Writes: []dedup.Write{bad}})
		if err == nil || errors.Is(err, dedup.ErrLeaseLost) {
			t.Fatalf("invalid write: %v", err)
		}
		if n := c.total(); n != 1 {
			t.Fatalf("a validation error was retried: %d calls", n)
		}
	})
}

func TestRecordTooLarge(t *testing.T) {
	// A response limit as large as an item, so that the item's own check
	// answers.
	c := &calls{}
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), c)
	st := newStore(t, client, recordsTable(t, client), dynamostore.MaxResponseSize(400*1024))
	at := clock()
	k := uniqueKey(t)
	cl := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(30)})
	c.reset()
	err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: cl.Lease, Response: make([]byte, 400*1024), Now: at(1), ExpiresAt: at(3600)})
	var tl *dedup.RecordTooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, dedup.ErrRecordTooLarge) || tl.Size <= tl.Max {
		t.Fatalf("400 KB response: %v", err)
	}
	if c.total() != 0 {
		t.Fatalf("an oversized record was sent (%v)", c.by)
	}
	// Just under the limit is accepted by DynamoDB, so the estimate is not
	// too strict by more than its fixed allowance.
	if err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: cl.Lease, Response: make([]byte, 400*1024-400), Now: at(1), ExpiresAt: at(3600)}); err != nil {
		t.Fatalf("response just under 400 KB: %v", err)
	}
}

func TestSubSecondRounding(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	client := dynamoClient(t, ep, nil)
	st := newStore(t, client, recordsTable(t, client))
	at := clock()
	k := uniqueKey(t)
	// A lease to +10.2s is stored as +11s: never shorter than asked.
	mustClaim(t, st, dedup.ClaimRequest{Key: k, Owner: "a", Now: at(0), LeaseUntil: at(10).Add(200 * time.Millisecond)})
	rec, err := st.Get(t.Context(), k)
	if err != nil || !rec.ExpiresAt.Equal(at(11)) {
		t.Fatalf("lease stored as %v (%v), want %v", rec.ExpiresAt, err, at(11))
	}
	if c := mustClaim(t, st, dedup.ClaimRequest{Key: k, Owner: "b", Now: at(11).Add(900 * time.Millisecond), LeaseUntil: at(40)}); c.Acquired {
		t.Fatal("claimed within the lease's last (rounded) second")
	}
	if c := mustClaim(t, st, dedup.ClaimRequest{Key: k, Owner: "b", Now: at(12), LeaseUntil: at(40)}); !c.Acquired {
		t.Fatal("not claimable a second after the rounded lease")
	}
}

func TestHooks(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	client := dynamoClient(t, ep, nil)
	var (
		mu      sync.Mutex
		ops     = map[string]int{}
		reasons []string
		expired int
	)
	st := newStore(t, client, recordsTable(t, client), dynamostore.WithHooks(
		onCall(func(_ context.Context, op string, _ time.Duration, _ error) { mu.Lock(); ops[op]++; mu.Unlock() }),
		onCancellation(func(_ context.Context, _, r string) { mu.Lock(); reasons = append(reasons, r); mu.Unlock() }),
		onExpiredPresent(func(context.Context, string) { mu.Lock(); expired++; mu.Unlock() }),
	))
	inv := newInventory(t, client)
	at := clock()
	k := uniqueKey(t)
	a := mustClaim(t, st, dedup.ClaimRequest{Key: k, Owner: "a", Now: at(0), LeaseUntil: at(5)})
	b := mustClaim(t, st, dedup.ClaimRequest{Key: k, Owner: "b", Now: at(6), LeaseUntil: at(60)})
	if b.Previous == nil || b.Previous.Owner != "a" || b.Lease.Version != a.Lease.Version+1 || b.Attempt != 1 {
		t.Fatalf("takeover: %+v", b)
	}
	_ = st.Complete(t.Context(), dedup.CompleteRequest{Lease: a.Lease, Now: at(7), ExpiresAt: at(99), Writes: []dedup.Write{inv.note("n")}})
	if _, err := st.Get(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if expired != 1 {
		t.Fatalf("OnDynamoExpiredPresent called %d times, want 1", expired)
	}
	if len(reasons) != 1 || reasons[0] != "ConditionalCheckFailed" {
		t.Fatalf("cancellation reasons %v", reasons)
	}
	// Claims: a's Put; b's Put, which meets a's expired record, then b's Update.
	if ops["claim"] != 3 || ops["complete"] != 1 || ops["get"] != 1 {
		t.Fatalf("calls by op %v", ops)
	}
}

func TestTenantLayout(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	client := dynamoClient(t, ep, nil)
	table := recordsTable(t, client, dynamostore.TenantLayout())
	st := newStore(t, client, table, dynamostore.TenantLayout())
	at := clock()
	tenant := uniqueName("tenant-")
	for i := range 3 {
		k, err := dedup.Key(tenant, fmt.Sprintf("msg-%d#with#hashes", i))
		if err != nil {
			t.Fatal(err)
		}
		if c := mustClaim(t, st, dedup.ClaimRequest{Key: k, Owner: "a", Now: at(0), LeaseUntil: at(30)}); !c.Acquired {
			t.Fatalf("claim %s", k)
		}
		if rec, err := st.Get(t.Context(), k); err != nil || rec.Key != k {
			t.Fatalf("get %s: %+v %v", k, rec, err)
		}
	}
	// The tenant is the partition key: its records are one Query away.
	out, err := client.Query(t.Context(), &ddb.QueryInput{
		TableName:                 aws.String(table),
		KeyConditionExpression:    aws.String("pk = :t"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberS{Value: tenant}},
	})
	if err != nil || out.Count != 3 {
		t.Fatalf("query tenant: %v, %d items", err, out.Count)
	}
	for _, bad := range []string{"no-tenant", "#fp", "tenant#"} {
		_, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: bad, Owner: "a", Now: at(0), LeaseUntil: at(1)})
		if !errors.Is(err, dynamostore.ErrBadKey) || retry.Classify(err) != retry.Permanent {
			t.Fatalf("key %.20q: %v, want a Permanent ErrBadKey", bad, err)
		}
	}
}

// A fingerprint over the sort key's 1024 bytes is stored as its hash: it
// claims, completes and is found again as a duplicate, where DynamoDB
// would refuse it as given on every claim.
func TestTenantLayoutLongKey(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	client := dynamoClient(t, ep, nil)
	st := newStore(t, client, recordsTable(t, client, dynamostore.TenantLayout()), dynamostore.TenantLayout())
	at := clock()
	k, err := dedup.Key(uniqueName("tenant-"), strings.Repeat("k", 1500))
	if err != nil {
		t.Fatal(err)
	}
	c := mustClaim(t, st, dedup.ClaimRequest{Key: k, Owner: "a", PayloadHash: "h", Now: at(0), LeaseUntil: at(30)})
	if !c.Acquired || c.Lease.Key != k {
		t.Fatalf("claim of a 1.5 KB key: %+v", c)
	}
	if err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: c.Lease, Response: []byte("ok"), Now: at(1), ExpiresAt: at(3600)}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	dup := mustClaim(t, st, dedup.ClaimRequest{Key: k, Owner: "b", PayloadHash: "h", Now: at(2), LeaseUntil: at(32)})
	if dup.Acquired || dup.Existing.Status != dedup.StatusCompleted || string(dup.Existing.Response) != "ok" {
		t.Fatalf("duplicate of a 1.5 KB key: %+v", dup)
	}
	if rec, err := st.Get(t.Context(), k); err != nil || rec.Status != dedup.StatusCompleted {
		t.Fatalf("get: %+v %v", rec, err)
	}
}

func TestRegionalRouting(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	// Two "regions" (two clients of the one server), each counting its calls.
	var east, west calls
	clients := []*ddb.Client{dynamoClient(t, ep, &east), dynamoClient(t, ep, &west)}
	table := recordsTable(t, clients[0])
	st := newStore(t, nil, table, dynamostore.WithRegionalClients(clients))
	at := clock()
	for i := range 40 {
		k := fmt.Sprintf("regional#%s-%d", uniqueName(""), i)
		east.reset()
		west.reset()
		cl := mustClaim(t, st, dedup.ClaimRequest{Key: k, Owner: "a", Now: at(0), LeaseUntil: at(30)})
		if err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: cl.Lease, Now: at(1), ExpiresAt: at(99)}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Get(t.Context(), k); err != nil {
			t.Fatal(err)
		}
		e, w := east.total(), west.total()
		if e*w != 0 || e+w != 3 {
			t.Fatalf("key %s split across regions: east %d, west %d", k, e, w)
		}
		// The same key always goes home, from another Store as well.
		again := newStore(t, nil, table, dynamostore.WithRegionalClients(clients))
		if _, err := again.Get(t.Context(), k); err != nil {
			t.Fatal(err)
		}
		if (e > 0 && east.total() != 4) || (w > 0 && west.total() != 4) {
			t.Fatalf("key %s routed elsewhere by a second store", k)
		}
	}
}

func TestCreateTableIdempotent(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	client := dynamoClient(t, ep, nil)
	name := recordsTable(t, client)
	if err := dynamostore.CreateTable(t.Context(), client, name); err != nil {
		t.Fatalf("second CreateTable: %v", err)
	}
	out, err := client.DescribeTable(t.Context(), &ddb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil || out.Table.TableStatus != types.TableStatusActive ||
		out.Table.BillingModeSummary == nil || out.Table.BillingModeSummary.BillingMode != types.BillingModePayPerRequest {
		t.Fatalf("table: %+v %v", out, err)
	}
	ttl, err := client.DescribeTimeToLive(t.Context(), &ddb.DescribeTimeToLiveInput{TableName: aws.String(name)})
	if err != nil || ttl.TimeToLiveDescription.TimeToLiveStatus != types.TimeToLiveStatusEnabled ||
		aws.ToString(ttl.TimeToLiveDescription.AttributeName) != "expires_at" {
		t.Fatalf("TTL: %+v %v", ttl, err)
	}
	if err := dynamostore.CreateTable(t.Context(), client, name, dynamostore.TenantLayout()); err == nil {
		t.Fatal("CreateTable accepted a table of the other layout")
	}
}

// Concurrent Completes reserving the same sku: on AWS they conflict
// (TransactionConflict, retried; DynamoDB Local serializes them instead),
// and every reservation lands exactly once.
func TestTransactionConflictsRetried(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	client := dynamoClient(t, ep, nil)
	var mu sync.Mutex
	codes := map[string]int{}
	st := newStore(t, client, recordsTable(t, client),
		dynamostore.WithRetryPolicy(fastPolicy(30)),
		dynamostore.WithHooks(onRetry(func(_ context.Context, _ string, c retry.Class, code string) {
			mu.Lock()
			codes[c.String()+"/"+code]++
			mu.Unlock()
		})))
	inv := newInventory(t, client)
	sku := uniqueName("sku-")
	inv.stock(t, sku, 1000)
	at := clock()
	const n = 24
	concurrently(t, n, func(int) error {
		c, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: uniqueKey(t), Owner: "o", Now: at(0), LeaseUntil: at(30)})
		if err != nil {
			return err
		}
		return st.Complete(t.Context(), dedup.CompleteRequest{Lease: c.Lease, Now: at(1), ExpiresAt: at(99), Writes: []dedup.Write{inv.reserve(sku, 1)}})
	})
	if a, r := inv.levels(t, sku); a != 1000-n || r != n {
		t.Fatalf("stock %d/%d, want %d/%d", a, r, 1000-n, n)
	}
	mu.Lock()
	defer mu.Unlock()
	for code := range codes {
		if code != "transient/TransactionConflict" {
			t.Fatalf("unexpected retry %s", code)
		}
	}
	t.Logf("retries: %v", codes)
}

// A transaction that writes to a business table that does not exist fails
// with an error that names the table: DynamoDB's own says only "requested
// resource not found".
func TestMissingBusinessTableNamed(t *testing.T) {
	st, _, _ := countedStore(t)
	at := clock()
	missing := uniqueName("onceq_missing_")
	write := dynamostore.Write{Put: &types.Put{
		TableName: aws.String(missing),
		Item:      map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: "s1"}},
	}}
	cl := mustClaim(t, st, dedup.ClaimRequest{Key: uniqueKey(t), PayloadHash: "h", Owner: "a", Now: at(0), LeaseUntil: at(30)})
	err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: cl.Lease, Now: at(1), ExpiresAt: at(3600), Writes: []dedup.Write{write}})
	var nf *dynamostore.TableNotFoundError
	if !errors.As(err, &nf) || nf.Table != missing || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Complete writing to a missing table: %v, want a TableNotFoundError naming %s", err, missing)
	}
	if c := retry.Classify(err); c != retry.Misconfigured {
		t.Errorf("class %v, want misconfigured", c)
	}
	if at := testenv.EmptySegment(err.Error()); at != "" {
		t.Errorf("%q has an empty segment at %s", err, at)
	}
	var rnf *types.ResourceNotFoundException
	if !errors.As(err, &rnf) {
		t.Errorf("%v does not wrap DynamoDB's ResourceNotFoundException", err)
	}
}

// foreignWrite is a business write of no Store this test runs.
type foreignWrite string

func (foreignWrite) WriteKind() dedup.WriteKind { return "foreign" }
