package dynamostore_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// Regression tests for failures known from other idempotency libraries, on
// DynamoDB Local; the consumer's configuration ones are in
// consumer/regression_test.go.

func storedNumber(t *testing.T, client *ddb.Client, table, key, attr string) int64 {
	t.Helper()
	out, err := client.GetItem(t.Context(), &ddb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}}})
	if err != nil {
		t.Fatal(err)
	}
	n, ok := out.Item[attr].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("%s of %s is %T, want a number", attr, key, out.Item[attr])
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// DynamoDB TTL reads epoch seconds; a library that stores milliseconds
// keeps every record some 50,000 years, one that compares a seconds
// expiry with a milliseconds clock sees every lease expired. The table's
// TTL attribute is expires_at, and the lease and retention expiries are
// stored there, and in lease_expires_at, as epoch seconds (rounded up),
// and read back as the same instants.
func TestRegression_ExpiryStoredInEpochSeconds(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	table := recordsTable(t, client)
	ttl, err := client.DescribeTimeToLive(t.Context(), &ddb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	if d := ttl.TimeToLiveDescription; d == nil || aws.ToString(d.AttributeName) != "expires_at" {
		t.Fatalf("TTL %+v, want on expires_at", d)
	}
	st := newStore(t, client, table)
	now := time.Now()
	key := uniqueKey(t)
	leaseUntil := now.Add(90*time.Second + 300*time.Millisecond)
	c := mustClaim(t, st, dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: "o", Now: now, LeaseUntil: leaseUntil})
	wantLease := leaseUntil.Truncate(time.Second).Add(time.Second).Unix()
	for _, attr := range []string{"expires_at", "lease_expires_at"} {
		if got := storedNumber(t, client, table, key, attr); got != wantLease {
			t.Fatalf("%s stored %d, want epoch seconds %d", attr, got, wantLease)
		}
	}
	rec, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.ExpiresAt.Equal(time.Unix(wantLease, 0)) || !rec.Live(now.Add(90*time.Second)) || rec.Live(now.Add(92*time.Second)) {
		t.Fatalf("read back ExpiresAt %v, want %v, live at +90s and not at +92s", rec.ExpiresAt, time.Unix(wantLease, 0))
	}
	retain := now.Add(24 * time.Hour)
	if err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: c.Lease, Response: []byte("r"), Now: now, ExpiresAt: retain}); err != nil {
		t.Fatal(err)
	}
	if got := storedNumber(t, client, table, key, "expires_at"); got != retain.Truncate(time.Second).Add(time.Second).Unix() {
		t.Fatalf("retention stored as %d, want epoch seconds %d", got, retain.Unix()+1)
	}
}

// A PENDING record without an expiry holds its key forever once its owner
// dies. The store refuses a claim whose lease does not end after Now, and
// a PENDING item without lease_expires_at (written by hand, or by an old
// tool) is refused on read as a corrupt record, not taken as live.
func TestRegression_PendingWithoutExpiryRefused(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	table := recordsTable(t, client)
	st := newStore(t, client, table)
	now := time.Now()
	for name, until := range map[string]time.Time{"zero": {}, "now": now, "past": now.Add(-time.Minute)} {
		_, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: uniqueKey(t), PayloadHash: "h", Owner: "o", Now: now, LeaseUntil: until})
		if !errors.Is(err, dynamostore.ErrNoLeaseExpiry) {
			t.Errorf("claim with a %s lease: %v, want ErrNoLeaseExpiry", name, err)
		}
	}
	key := uniqueKey(t)
	n := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	if _, err := client.PutItem(t.Context(), &ddb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"pk": s(key), "status": s("PENDING"), "version": n(1), "owner": s("o"), "payload_hash": s("h"),
		"attempts": n(1), "created_at": n(now.Unix()), "expires_at": n(now.Unix() + 60),
	}}); err != nil {
		t.Fatal(err)
	}
	_, err := st.Get(t.Context(), key)
	var ce *dynamostore.CorruptRecordError
	if !errors.As(err, &ce) || ce.KeyHash != dedup.KeyHash(key) || !errors.Is(err, dynamostore.ErrCorruptRecord) {
		t.Fatalf("PENDING without lease_expires_at read as %v, want a *CorruptRecordError for %s", err, key)
	}
}
