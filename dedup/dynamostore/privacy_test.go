package dynamostore_test

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// Keys may hold personal data: every error path a key can reach names it
// by dedup.KeyHash, in error texts and log lines alike.
func TestNoKeyInErrorsOrLogs(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	client := dynamoClient(t, ep, nil)
	var logs testenv.LogBuffer
	logger := logs.Logger(slog.LevelDebug)
	table := recordsTable(t, client)
	st := newStore(t, client, table, dynamostore.WithLogger(logger))
	at := clock()
	secret := "jane.doe@example.com-" + uniqueName("")
	keyOf := func(what string) string { return "orders#" + secret + "-" + what }

	var errs []error
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		errs = append(errs, err)
	}

	// Lease lost: Complete, Fail and Extend by a taken-over owner.
	k := keyOf("lease")
	a := mustClaim(t, st, dedup.ClaimRequest{Key: k, Owner: "a", PayloadHash: "h", Now: at(0), LeaseUntil: at(10)})
	mustClaim(t, st, dedup.ClaimRequest{Key: k, Owner: "b", PayloadHash: "h", Now: at(11), LeaseUntil: at(40)})
	check("Complete", st.Complete(t.Context(), dedup.CompleteRequest{Lease: a.Lease, Now: at(12), ExpiresAt: at(3600)}))
	check("Fail", st.Fail(t.Context(), dedup.FailRequest{Lease: a.Lease, Now: at(12), RetryAt: at(20)}))
	check("Extend", st.Extend(t.Context(), dedup.ExtendRequest{Lease: a.Lease, Now: at(12), LeaseUntil: at(50)}))

	// Key reuse, as the consumer reports it from the Claim's Existing.
	reuse := mustClaim(t, st, dedup.ClaimRequest{Key: k, Owner: "c", PayloadHash: "other", Now: at(13), LeaseUntil: at(40)})
	check("key reuse", &dedup.KeyReuseError{Key: k, Existing: reuse.Existing})

	// Unreadable records: a live one (the claim fails, Get fails) and an
	// expired one (the claim takes it over and logs).
	for i, exp := range []int64{at(3600).Unix(), at(-7200).Unix()} {
		ck := keyOf("corrupt-" + strconv.Itoa(i))
		if _, err := client.PutItem(t.Context(), &ddb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: ck}, "status": &types.AttributeValueMemberS{Value: "BOGUS"},
			"expires_at": &types.AttributeValueMemberN{Value: strconv.FormatInt(exp, 10)},
		}}); err != nil {
			t.Fatal(err)
		}
		_, err := st.Get(t.Context(), ck)
		check("Get corrupt", err)
		c, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: ck, Owner: "a", Now: at(0), LeaseUntil: at(30)})
		if i == 0 {
			check("Claim corrupt", err)
		} else if err != nil || !c.Acquired {
			t.Fatalf("claim over an expired corrupt record: %+v %v", c, err)
		}
	}
	if !strings.Contains(logs.String(), "undecodable") {
		t.Fatalf("no log of the undecodable record taken over:\n%s", logs.String())
	}

	// Oversize record, absent record.
	big := mustClaim(t, st, dedup.ClaimRequest{Key: keyOf("big"), Owner: "a", Now: at(0), LeaseUntil: at(30)})
	check("oversize", st.Complete(t.Context(), dedup.CompleteRequest{Lease: big.Lease, Response: make([]byte, 500<<10), Now: at(1), ExpiresAt: at(3600)}))
	_, err := st.Get(t.Context(), keyOf("absent"))
	check("Get absent", err)

	// A tenant too long for the partition key.
	tenantTable := recordsTable(t, client, dynamostore.TenantLayout())
	tst := newStore(t, client, tenantTable, dynamostore.TenantLayout(), dynamostore.WithLogger(logger))
	_, err = tst.Claim(t.Context(), dedup.ClaimRequest{Key: strings.Repeat(secret, 3000/len(secret)+1) + "#fp", Owner: "a", Now: at(0), LeaseUntil: at(30)})
	check("tenant too long", err)

	// A missing table.
	missing := newStore(t, client, uniqueName("onceq_missing_"), dynamostore.WithLogger(logger))
	_, err = missing.Claim(t.Context(), dedup.ClaimRequest{Key: keyOf("missing"), Owner: "a", Now: at(0), LeaseUntil: at(30)})
	check("Claim on a missing table", err)
	_, err = missing.Get(t.Context(), keyOf("missing"))
	check("Get on a missing table", err)

	// The memory store's errors too.
	mem := memstoretest.New(t)
	now := time.Now()
	check("memory lease lost", mem.Complete(t.Context(), dedup.CompleteRequest{Lease: dedup.Lease{Key: k, Owner: "a", Version: 1}, Now: now, ExpiresAt: now}))
	_, err = mem.Get(t.Context(), k)
	check("memory Get absent", err)

	for _, err := range errs {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error text carries the key: %v", err)
		}
		if !strings.Contains(err.Error(), "key_hash") && !errors.Is(err, dedup.ErrRecordTooLarge) && !errors.Is(err, dedup.ErrResponseTooLarge) {
			t.Errorf("error text does not name the key by key_hash: %v", err)
		}
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, secret) {
			t.Errorf("log line carries the key: %s", line)
		}
	}
}
