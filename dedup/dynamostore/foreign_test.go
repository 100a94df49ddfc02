package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithy "github.com/aws/smithy-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
)

// recordAttrs are the attributes a record holds besides its key. A record
// the store meets may lack any of them: an operator's hand-written item,
// an older schema.
var recordAttrs = []string{"status", "version", "owner", "payload_hash", "attempts", "created_at", "expires_at",
	"lease_expires_at", "response", "error"}

// foreignState is a record as planted: owner "o", version 3, two failed
// runs, and status and expiry as given (seconds from the test's now).
type foreignState struct {
	name    string
	status  dedup.Status
	expires int
}

var foreignStates = []foreignState{
	{"live PENDING", dedup.StatusPending, 30},
	{"expired PENDING", dedup.StatusPending, -30},
	{"expired FAILED", dedup.StatusFailed, -30},
	{"expired COMPLETED", dedup.StatusCompleted, -30},
}

// plantRecord writes key's record by hand in state, without attribute
// missing ("" leaves nothing out).
func plantRecord(t *testing.T, client *ddb.Client, st *dynamostore.Store, key string, s foreignState, at func(int) time.Time, missing string) {
	t.Helper()
	item, err := st.ItemKey(key)
	if err != nil {
		t.Fatal(err)
	}
	n := func(i int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(i, 10)}
	}
	exp := at(s.expires).Unix()
	for name, v := range map[string]types.AttributeValue{
		"status":           &types.AttributeValueMemberS{Value: string(s.status)},
		"version":          n(3),
		"owner":            &types.AttributeValueMemberS{Value: "o"},
		"payload_hash":     &types.AttributeValueMemberS{Value: "h"},
		"attempts":         n(2),
		"created_at":       n(at(-100).Unix()),
		"expires_at":       n(exp),
		"lease_expires_at": n(exp),
		"response":         &types.AttributeValueMemberB{Value: []byte("stored")},
		"error":            &types.AttributeValueMemberS{Value: "an earlier failure"},
	} {
		if name != missing {
			item[name] = v
		}
	}
	if _, err := client.PutItem(t.Context(), &ddb.PutItemInput{TableName: aws.String(st.Table()), Item: item}); err != nil {
		t.Fatalf("plant %s: %v", s.name, err)
	}
}

// refused reports whether DynamoDB refused the request as invalid: the
// whole request (ValidationException) or an item of a transaction.
func refused(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorCode() == "ValidationException" {
		return true
	}
	var te *dynamostore.TransactionError
	return errors.As(err, &te) && te.ErrorCode() == "ValidationError"
}

// Every request the store builds is one DynamoDB accepts, whatever record
// it meets: each operation (claim, claim-complete, complete, fail, extend,
// with and without a skew margin, a response, business writes) runs over
// records that lack each attribute in turn, in both table layouts and
// with an archive. A
// request DynamoDB refused would dead-letter a valid message. Where the
// record can still be read for what the operation needs, the operation
// does what it does on a whole record: a claim takes over an expired
// record, a fenced update of the live lease lands.
func TestForeignRecordsRequestsAccepted(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	inv := newInventory(t, client)
	for _, lay := range []struct {
		name  string
		table []dynamostore.TableOption
		store []dynamostore.Option
		key   func() string
	}{
		{"default layout", nil, nil, func() string { return uniqueKey(t) }},
		// A claim that takes over a COMPLETED record, or finds none,
		// consults the archive and may complete the record from it.
		{"default layout, with an archive", nil, []dynamostore.Option{dynamostore.WithArchive(recordsTable(t, client))},
			func() string { return uniqueKey(t) }},
		{"tenant layout, sharded", []dynamostore.TableOption{dynamostore.TenantLayout()},
			[]dynamostore.Option{dynamostore.TenantLayout(), dynamostore.TenantShards(4)},
			func() string { return "acme#" + uniqueKey(t) }},
	} {
		t.Run(lay.name, func(t *testing.T) {
			t.Parallel()
			st := newStore(t, client, recordsTable(t, client, lay.table...), lay.store...)
			at := clock()
			ctx := t.Context()
			type op struct {
				name  string
				claim bool // a claim (else a fenced update of lease o/3)
				do    func(key string) (dedup.Claim, error)
			}
			lease := func(key string) dedup.Lease { return dedup.Lease{Key: key, Owner: "o", Version: 3} }
			note := func() []dedup.Write { return []dedup.Write{inv.note(uniqueName("row-"))} }
			claim := func(margin time.Duration) func(string) (dedup.Claim, error) {
				return func(key string) (dedup.Claim, error) {
					return st.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: "n", Now: at(0), LeaseUntil: at(60), SkewMargin: margin})
				}
			}
			claimComplete := func(margin time.Duration, resp []byte, writes []dedup.Write) func(string) (dedup.Claim, error) {
				return func(key string) (dedup.Claim, error) {
					return st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: key, PayloadHash: "h", Owner: "n", Response: resp,
						Now: at(0), ExpiresAt: at(3600), SkewMargin: margin, Writes: writes})
				}
			}
			fenced := func(f func(key string) error) func(string) (dedup.Claim, error) {
				return func(key string) (dedup.Claim, error) { return dedup.Claim{}, f(key) }
			}
			ops := []op{
				{"claim", true, claim(0)},
				{"claim with a skew margin", true, claim(5 * time.Second)},
				{"claim-complete", true, claimComplete(0, []byte("r"), nil)},
				{"claim-complete with a skew margin, no response", true, claimComplete(5*time.Second, nil, nil)},
				{"claim-complete with writes", true, claimComplete(0, []byte("r"), note())},
				{"claim-complete with writes and a skew margin", true, claimComplete(5*time.Second, nil, note())},
				{"complete", false, fenced(func(key string) error {
					return st.Complete(ctx, dedup.CompleteRequest{Lease: lease(key), Response: []byte("r"), Now: at(1), ExpiresAt: at(3600)})
				})},
				{"complete without a response", false, fenced(func(key string) error {
					return st.Complete(ctx, dedup.CompleteRequest{Lease: lease(key), Now: at(1), ExpiresAt: at(3600)})
				})},
				{"complete with writes", false, fenced(func(key string) error {
					return st.Complete(ctx, dedup.CompleteRequest{Lease: lease(key), Response: []byte("r"), Now: at(1), ExpiresAt: at(3600), Writes: note()})
				})},
				{"fail", false, fenced(func(key string) error {
					return st.Fail(ctx, dedup.FailRequest{Lease: lease(key), Reason: "boom", Now: at(1), RetryAt: at(10)})
				})},
				{"fail, attempt refunded", false, fenced(func(key string) error {
					return st.Fail(ctx, dedup.FailRequest{Lease: lease(key), Reason: "boom", Now: at(1), RetryAt: at(10), RefundAttempt: true})
				})},
				{"dead letter", false, fenced(func(key string) error {
					return st.Fail(ctx, dedup.FailRequest{Lease: lease(key), Reason: "boom", Now: at(1), RetryAt: at(3600), DeadLetter: true, ResetAttempts: true})
				})},
				{"extend", false, fenced(func(key string) error {
					return st.Extend(ctx, dedup.ExtendRequest{Lease: lease(key), Now: at(1), LeaseUntil: at(90)})
				})},
			}
			for _, s := range foreignStates {
				for _, missing := range append([]string{""}, recordAttrs...) {
					for _, o := range ops {
						what := fmt.Sprintf("%s over a %s record without %q", o.name, s.name, missing)
						key := lay.key()
						plantRecord(t, client, st, key, s, at, missing)
						c, err := o.do(key)
						switch {
						case refused(err):
							t.Errorf("%s: DynamoDB refused the request: %v", what, err)
							continue
						case err != nil && !errors.Is(err, dedup.ErrLeaseLost) && !errors.Is(err, dynamostore.ErrCorruptRecord):
							t.Errorf("%s: %v", what, err)
							continue
						}
						// What a record without the attribute still says
						// (the fence is the owner, version and status: an
						// expired lease still lands while untaken).
						expired := s.expires < 0 && missing != "expires_at"
						fence := s.status == dedup.StatusPending &&
							missing != "owner" && missing != "version" && missing != "status" && (missing != "expires_at" || o.name != "extend")
						switch {
						case o.claim && expired && (err != nil || !c.Acquired && !(c.Archived && s.status == dedup.StatusCompleted)):
							// With an archive, an expired COMPLETED record
							// is its own tombstone: a duplicate.
							t.Errorf("%s: claim %+v, %v; want the expired record taken over", what, c, err)
						case !o.claim && fence && err != nil:
							t.Errorf("%s: %v; want the update of the live lease to land", what, err)
						case !o.claim && !fence && !errors.Is(err, dedup.ErrLeaseLost):
							t.Errorf("%s: %v; want the lease lost", what, err)
						}
					}
				}
			}
		})
	}
}

// A cancelled transaction may report the record's condition failure
// without the record (here a proxy strips it, as a transaction that
// does not return it would): ClaimComplete with business writes then
// takes over an expired record with a request DynamoDB accepts, and
// answers a live one with that record, never a corrupt-record error.
func TestClaimCompleteCancellationWithoutItem(t *testing.T) {
	rig := newFaultRig(t, fastPolicy(3))
	at := clock()
	for _, s := range []foreignState{{"expired FAILED", dedup.StatusFailed, -30}, {"live PENDING", dedup.StatusPending, 30}} {
		for _, margin := range []time.Duration{0, 5 * time.Second} {
			what := fmt.Sprintf("%s, skew margin %v", s.name, margin)
			key := uniqueKey(t)
			plantRecord(t, dynamoClient(t, testenv.DynamoDBEndpoint(t), nil), rig.direct, key, s, at, "")
			rig.proxy.ClearRules()
			rig.proxy.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Times: 1, Fault: faultproxy.Cancel, Reasons: []string{"ConditionalCheckFailed", "None"}})
			c, err := rig.st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: key, PayloadHash: "h", Owner: "n", Response: []byte("r"),
				Now: at(0), ExpiresAt: at(3600), SkewMargin: margin, Writes: []dedup.Write{rig.inv.note(uniqueName("row-"))}})
			if err != nil {
				t.Errorf("%s: %v", what, err)
				continue
			}
			rec, err := rig.direct.Get(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			switch s.status {
			case dedup.StatusFailed:
				if !c.Acquired || rec.Status != dedup.StatusCompleted || rec.Owner != "n" || rec.Version != 4 || rec.Attempts != 2 {
					t.Errorf("%s: claim %+v, record %+v; want it taken over at version 4, its 2 failed runs kept", what, c, rec)
				}
			default:
				if c.Acquired || c.Existing.Owner != "o" || c.Existing.Version != 3 || rec.Owner != "o" {
					t.Errorf("%s: claim %+v, record %+v; want the live record as Existing", what, c, rec)
				}
			}
		}
	}
}

// When the takeover's transaction, too, reports the record's condition
// failure without the record, and the record is gone when read (TTL
// removed it meanwhile), ClaimComplete says to try again (a transient
// error), never that the key is held by a corrupt record.
func TestClaimCompleteCancellationRecordGone(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	var key string
	var st *dynamostore.Store
	cancellations := 0
	remove := onCancellation(func(ctx context.Context, _, _ string) {
		if cancellations++; cancellations == 2 {
			k, err := st.ItemKey(key)
			if err == nil {
				_, err = client.DeleteItem(ctx, &ddb.DeleteItemInput{TableName: aws.String(st.Table()), Key: k})
			}
			if err != nil {
				t.Error(err)
			}
		}
	})
	rig := newFaultRig(t, fastPolicy(3), dynamostore.WithHooks(remove))
	st = rig.direct
	at := clock()
	key = uniqueKey(t)
	plantRecord(t, client, rig.direct, key, foreignState{"expired FAILED", dedup.StatusFailed, -30}, at, "")
	rig.proxy.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Times: 2, Fault: faultproxy.Cancel, Reasons: []string{"ConditionalCheckFailed", "None"}})
	_, err := rig.st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: key, PayloadHash: "h", Owner: "n", Response: []byte("r"),
		Now: at(0), ExpiresAt: at(3600), SkewMargin: 5 * time.Second, Writes: []dedup.Write{rig.inv.note(uniqueName("row-"))}})
	if cancellations != 2 || err == nil || retry.Classify(err) != retry.Transient || errors.Is(err, dynamostore.ErrCorruptRecord) {
		t.Fatalf("%d cancellations, %v (%v); want a transient error after 2", cancellations, err, retry.Classify(err))
	}
}

// A record whose version is not a number cannot be taken over (the
// version counts on from it): both claims report the corrupt record, a
// Permanent error, rather than send an update DynamoDB refuses.
func TestClaimOverMistypedVersion(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	inv := newInventory(t, client)
	st := newStore(t, client, recordsTable(t, client))
	at := clock()
	for _, writes := range [][]dedup.Write{nil, {inv.note(uniqueName("row-"))}} {
		for _, complete := range []bool{false, true} {
			key := uniqueKey(t)
			plantRecord(t, client, st, key, foreignState{"expired FAILED", dedup.StatusFailed, -30}, at, "")
			k, _ := st.ItemKey(key)
			if _, err := client.UpdateItem(t.Context(), &ddb.UpdateItemInput{TableName: aws.String(st.Table()), Key: k,
				UpdateExpression:          aws.String("SET version = :s"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: "3"}}}); err != nil {
				t.Fatal(err)
			}
			var err error
			if complete {
				_, err = st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: key, PayloadHash: "h", Owner: "n", Now: at(0), ExpiresAt: at(3600), Writes: writes})
			} else if writes == nil {
				_, err = st.Claim(t.Context(), dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: "n", Now: at(0), LeaseUntil: at(60)})
			} else {
				continue
			}
			if refused(err) || !errors.Is(err, dynamostore.ErrCorruptRecord) || retry.Classify(err) != retry.Permanent {
				t.Errorf("claim-complete %v, %d writes: %v; want a corrupt record", complete, len(writes), err)
			}
		}
	}
}

// Through the consumer, in both modes (claim then complete, and
// OneRoundTrip's ClaimComplete), with its default skew margin: a message
// whose key meets an expired record without a version, written by hand,
// is processed, not dead-lettered.
func TestForeignRecordMessageProcessed(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	st := newStore(t, client, recordsTable(t, client))
	for _, mode := range []struct {
		name string
		opts []consumer.GuardOption
	}{{"claim then complete", nil}, {"one round trip", []consumer.GuardOption{consumer.OneRoundTrip()}}} {
		g, err := consumer.NewGuard(st, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
			return consumer.Result{Response: []byte("done")}, nil
		}), append([]consumer.GuardOption{consumer.Namespace("test"), consumer.WithLogger(testenv.Logger(t))}, mode.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		id := uniqueName("order-")
		key, _ := dedup.Key("test", id)
		now := time.Now()
		plantRecord(t, client, st, key, foreignState{"expired FAILED", dedup.StatusFailed, -30},
			func(sec int) time.Time { return now.Add(time.Duration(sec) * time.Second) }, "version")
		o := g.Process(t.Context(), &consumer.Message{ID: "m", Body: []byte("{}"), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: id}})
		if o.Kind != consumer.Processed {
			t.Errorf("%s: %v (%v); want processed", mode.name, o.Kind, o.Err)
		}
	}
}
